"""One step of llama.cpp's sampler chain per row, through llama-cpp-python's C bindings (no model).

Per row (:meth:`LlamaSession.step`):

1. a ``llama_token_data_array`` of the row's float32 logits, token ``i`` at position ``i``,
   unsorted (what ``llama_sampler_sample`` builds from a context's logits);
2. a chain (``llama_sampler_chain_init``) holding, in :func:`chain_stages` order, the
   samplers the row sets, then the slot's ``dist`` sampler;
3. the history (prompt, then generated) passed to ``llama_sampler_accept`` — the penalty
   sampler's window (llama-server accepts a prompt this way before the first step);
4. ``llama_sampler_apply``; the token is ``data[selected].id``, the distribution the ``p`` that
   ``dist`` left on its candidates; the processed logits are the array's logits after a second
   chain of the rewriting stages alone (logit bias, penalties, DRY) ending in ``greedy``.

With ``mirostat`` 1 or 2 the chain is ``common_sampler_init``'s for it (``common/sampling.cpp``):
the logit bias, ``llama_sampler_init_temp`` (when the row sets a temperature), then the slot's
``llama_sampler_init_mirostat(V, seed, tau, eta, 100)`` or ``llama_sampler_init_mirostat_v2(seed,
tau, eta)``, which draws the token itself (no ``dist``); the row's penalties, DRY and filters are
not in it. The mirostat sampler belongs to the slot like ``dist``: its ``mu`` and generator are
its state across steps.

The ``dist``, XTC and mirostat samplers belong to the slot (one request per slot, as the reference's
streams do) and are taken out of the step's chain (``llama_sampler_chain_remove``) before it
is freed, so their ``std::mt19937`` streams continue across steps. A new owner or seed in the
slot gets new ones, and so do new XTC settings within one request (a llama.cpp request cannot
change its chain; the reference would continue both streams: only reachable through the Python
API, no case does it).
"""

from __future__ import annotations

import ctypes
from typing import Optional, Sequence

import numpy as np
import torch

from ..base import Row, RowError, RowResult, claim_slot
from ..reference.modes import effective_seed
from ..reference.mt19937 import DEFAULT_SEED, engine_seed

__all__ = ["LlamaSession", "chain_stages"]


#: The chain stages that rewrite logits (the processed logits are their output).
_REWRITES = ("logit_bias", "penalties", "dry")

#: ``struct llama_token_data`` (``include/llama.h``): id, logit, p.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


def _lib():
    import llama_cpp
    return llama_cpp


def chain_stages(row: Row, order: Sequence[str]) -> list:
    """The samplers a row puts in its chain, in ``order``: ``[(name, args)]``, ``dist`` not included.

    Parameters
    ----------
    row : Row
    order : sequence of str
        Stage names: ``logit_bias``, ``penalties``, ``dry``, ``top_n_sigma``, ``top_k``, ``typical_p``,
        ``top_p``, ``min_p``, ``xtc``, ``temperature``. A mirostat row (``mirostat`` 1 or 2) gets
        ``logit_bias`` and ``temp`` (``llama_sampler_init_temp``) only: mirostat itself is the slot's.

    Returns
    -------
    list of (str, tuple)
        A stage is present only when the row sets its parameter (the chain API has no
        defaults); ``temperature`` is ``temp_ext(T, range, exponent)`` with T 1.0 when unset.
    """
    mk = (row.min_keep or 0) % (1 << 64)   # size_t: a negative value wraps, as a C caller's would
    out = []
    if row.mirostat in (1, 2):
        # common_sampler_init with mirostat: logit bias, temp, mirostat (the slot's; not listed here)
        if "logit_bias" in order and row.logit_bias:
            out.append(("logit_bias", tuple(row.logit_bias)))
        if row.temperature is not None:
            out.append(("temp", (row.temperature,)))
        return out
    for name in order:
        if name == "logit_bias" and row.logit_bias:
            out.append((name, tuple(row.logit_bias)))
        elif name == "penalties" and any(v is not None for v in (row.repetition_penalty, row.presence_penalty,
                                                                 row.frequency_penalty)):
            hist = len(row.prompt) + len(row.generated)
            last_n = row.penalty_last_n if row.penalty_last_n is not None else max(hist, 1)
            out.append((name, (last_n, row.repetition_penalty if row.repetition_penalty is not None else 1.0,
                               row.frequency_penalty or 0.0, row.presence_penalty or 0.0)))
        elif name == "dry" and row.dry_multiplier is not None:
            hist = len(row.prompt) + len(row.generated)
            last_n = row.dry_penalty_last_n if row.dry_penalty_last_n is not None else max(hist, 1)
            out.append((name, (row.dry_multiplier, row.dry_base if row.dry_base is not None else 1.75,
                               row.dry_allowed_length if row.dry_allowed_length is not None else 2, last_n)))
        elif name == "top_n_sigma" and row.top_n_sigma is not None:
            out.append((name, (row.top_n_sigma,)))
        elif name == "top_k" and row.top_k is not None:
            out.append((name, (row.top_k,)))
        elif name == "typical_p" and row.typical_p is not None:
            out.append((name, (row.typical_p, mk)))
        elif name == "top_p" and row.top_p is not None:
            out.append((name, (row.top_p, mk)))
        elif name == "min_p" and row.min_p is not None:
            out.append((name, (row.min_p, mk)))
        elif name == "xtc" and row.xtc_probability is not None:
            out.append((name, (row.xtc_probability, row.xtc_threshold if row.xtc_threshold is not None else 0.1, mk)))
        elif name == "temperature" and (row.temperature is not None or row.dynatemp_range is not None):
            out.append((name, (row.temperature if row.temperature is not None else 1.0, row.dynatemp_range or 0.0,
                               row.dynatemp_exponent if row.dynatemp_exponent is not None else 1.0)))
    return out


def _token_buffer(logits: torch.Tensor) -> np.ndarray:
    """``(V,)`` :data:`_TOKEN_DATA` records of ``logits`` (float32), token ``i`` at position ``i``, ``p`` 0."""
    x = logits.detach().to(torch.float32).cpu().numpy()
    buf = np.zeros(x.shape[0], dtype=_TOKEN_DATA)
    buf["id"] = np.arange(x.shape[0], dtype=np.int32)
    buf["logit"] = x
    return buf


def _candidates(arr) -> np.ndarray:
    """The array's ``size`` candidates as :data:`_TOKEN_DATA` records (a copy), from its current ``data`` pointer
    (XTC moves it past the cut tokens)."""
    if arr.size == 0:
        return np.zeros(0, dtype=_TOKEN_DATA)
    raw = ctypes.string_at(ctypes.addressof(arr.data.contents), arr.size * _TOKEN_DATA.itemsize)
    return np.frombuffer(raw, dtype=_TOKEN_DATA).copy()


def _distribution(arr, V: int) -> torch.Tensor:
    """``(V,)`` float64: the probabilities ``dist`` left on its candidates (``data[i].p``, normalised), 0 elsewhere."""
    c = _candidates(arr)
    out = np.zeros(V, dtype=np.float64)
    np.add.at(out, c["id"], c["p"].astype(np.float64))
    return torch.from_numpy(out)


def _softmax_of(arr, V: int) -> torch.Tensor:
    """``(V,)`` float64 softmax of the candidates' logits (after the chain's temperature), 0 elsewhere."""
    c = _candidates(arr)
    out = torch.zeros(V, dtype=torch.float64)
    out[torch.from_numpy(c["id"].astype(np.int64))] = torch.softmax(torch.from_numpy(c["logit"].astype(np.float64)), 0)
    return out


class LlamaSession:
    """Per-slot generators and the per-row chain of llama.cpp's sampler (one decode).

    Parameters
    ----------
    order : sequence of str
        The stage order (:data:`impls.llamacpp.CHAIN_ORDER`).
    """

    def __init__(self, order: Sequence[str]):
        self.order = tuple(order)
        self.lib = _lib()
        # slot -> {"key": (owner, seed, xtc args, mirostat args), "seed", "dist", "xtc", "miro"}
        self._slots: dict = {}

    def _free_slot(self, cur: dict) -> None:
        for name in ("dist", "xtc", "miro"):
            if cur.get(name) is not None:
                self.lib.llama_sampler_free(cur[name])

    def __del__(self):
        try:
            for cur in self._slots.values():
                self._free_slot(cur)
        except Exception:
            pass

    @staticmethod
    def mirostat_args(row: Row) -> Optional[tuple]:
        """``(version, tau, eta)`` of a mirostat row (common's defaults 5.0 and 0.1 when unset), else None."""
        if row.mirostat not in (1, 2):
            return None
        return (int(row.mirostat), row.mirostat_tau if row.mirostat_tau is not None else 5.0,
                row.mirostat_eta if row.mirostat_eta is not None else 0.1)

    def _mirostat(self, args: tuple, seed: int, V: int):
        version, tau, eta = args
        if version == 1:
            return self.lib.llama_sampler_init_mirostat(V, seed, tau, eta, 100)   # common's m
        return self.lib.llama_sampler_init_mirostat_v2(seed, tau, eta)

    def _make(self, name: str, args: tuple, V: int):
        lib = self.lib
        if name == "logit_bias":
            arr = (lib.llama_logit_bias * len(args))(*[lib.llama_logit_bias(int(t), float(b)) for t, b in args])
            return lib.llama_sampler_init_logit_bias(V, len(args), arr)
        if name == "penalties":
            return lib.llama_sampler_init_penalties(V, *args)
        if name == "dry":
            # no vocabulary and no sequence breakers (they are strings tokenised through a model's vocab)
            return lib.llama_sampler_init_dry(None, *args, None, 0)
        if name == "top_n_sigma":
            return lib.llama_sampler_init_top_n_sigma(*args)
        if name == "top_k":
            return lib.llama_sampler_init_top_k(*args)
        if name == "typical_p":
            return lib.llama_sampler_init_typical(*args)
        if name == "top_p":
            return lib.llama_sampler_init_top_p(*args)
        if name == "min_p":
            return lib.llama_sampler_init_min_p(*args)
        if name == "temperature":
            return lib.llama_sampler_init_temp_ext(*args)
        if name == "temp":
            return lib.llama_sampler_init_temp(*args)
        raise ValueError(f"unknown chain stage {name!r}")

    def _slot(self, row: Row, xtc_args: Optional[tuple], V: int) -> dict:
        """The slot's ``dist`` (and XTC, or mirostat) sampler, new for a new owner, seed, XTC or mirostat setting."""
        seed = engine_seed(effective_seed(row))
        engine = DEFAULT_SEED if seed is None else seed
        miro = self.mirostat_args(row)
        key = (row.request_id, engine, xtc_args, miro, V if miro and miro[0] == 1 else None)
        cur = self._slots.get(row.slot)
        if cur is None or cur["key"] != key:
            if cur is not None:
                self._free_slot(cur)
            cur = {"key": key, "seed": engine, "dist": None, "xtc": None, "miro": None}
            if miro is not None:
                cur["miro"] = self._mirostat(miro, engine, V)
            else:
                cur["dist"] = self.lib.llama_sampler_init_dist(engine)
                if xtc_args is not None:
                    cur["xtc"] = self.lib.llama_sampler_init_xtc(*xtc_args, engine)
            self._slots[row.slot] = cur
        return cur

    def _one(self, row: Row) -> RowResult:
        lib = self.lib
        x = row.logits.detach().to(torch.float32).cpu()
        V = int(x.shape[0])
        stages = chain_stages(row, self.order)
        xtc_args = next((a for n, a in stages if n == "xtc"), None)
        slot = self._slot(row, xtc_args, V)
        xtc, _s = slot["xtc"], slot["seed"]
        final = slot["miro"] if slot["miro"] is not None else slot["dist"]
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        owned = []   # chain positions of the slot's samplers, which outlive the step
        try:
            for name, args in stages:
                if name == "xtc":
                    owned.append(lib.llama_sampler_chain_n(chain))
                    lib.llama_sampler_chain_add(chain, xtc)
                else:
                    lib.llama_sampler_chain_add(chain, self._make(name, args, V))
            owned.append(lib.llama_sampler_chain_n(chain))
            lib.llama_sampler_chain_add(chain, final)
            for t in list(row.prompt) + list(row.generated):
                lib.llama_sampler_accept(chain, int(t))
            buf = _token_buffer(x)
            data = (lib.llama_token_data * V).from_buffer(buf)
            arr = lib.llama_token_data_array(data, V, -1, False)
            lib.llama_sampler_apply(chain, ctypes.byref(arr))
            if arr.selected < 0 or arr.selected >= arr.size:
                raise RowError("no_valid_token", f"llama.cpp selected index {arr.selected} of {arr.size} candidates")
            token = int(arr.data[arr.selected].id)
            probs = _distribution(arr, V)
        finally:
            for i in sorted(owned, reverse=True):
                lib.llama_sampler_chain_remove(chain, i)
            lib.llama_sampler_free(chain)
        dyn = row.dynatemp_range is not None and row.dynatemp_range > 0
        mode = "greedy" if row.temperature is not None and row.temperature <= 0 and not dyn else "sampling"
        if xtc_args is not None and 0 < xtc_args[0] < 1 and xtc_args[1] <= 0.5:
            # XTC's coin chose one of two candidate sets: the distribution the row is drawn from is
            # their mixture, each computed by llama.cpp's own chain with the coin fixed
            cut = self._side_chain(row, stages, {"xtc": (1.0,) + tuple(xtc_args[1:])}, V)
            uncut = self._side_chain(row, [st for st in stages if st[0] != "xtc"], {}, V)
            probs = xtc_args[0] * cut + (1.0 - xtc_args[0]) * uncut
        rewrites = [st for st in stages if st[0] in _REWRITES]
        # no rewriting sampler: the processed logits are the logits as given (no second chain)
        rewritten = self._side_chain(row, rewrites, {}, V, logits=True) if rewrites else x.clone()
        extra = {"llama_seed": _s}
        if slot["miro"] is not None:
            extra["mirostat_kept"] = int(arr.size)   # the size mirostat's cut left (the array of the draw)
        return RowResult(token=token, mode=mode, probs=probs, rewritten_logits=rewritten, extra=extra)

    def _side_chain(self, row: Row, stages: list, replace: dict, V: int, logits: bool = False) -> torch.Tensor:
        """What a chain of ``stages`` (with ``replace``'s arguments) leaves, greedy-drawn.

        ``logits``: the ``(V,)`` float32 logits of the array by token id (the rewrites' output: the
        processed logits, from a chain of the logit bias, penalties and DRY alone); else the
        ``(V,)`` float64 distribution (the returned distribution of a row whose XTC coin decides
        between two sets). The chain ends in ``llama_sampler_init_greedy``: no generator is read.
        """
        lib = self.lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        try:
            for name, args in stages:
                args = replace.get(name, args)
                smpl = (lib.llama_sampler_init_xtc(*args, 0) if name == "xtc" else self._make(name, args, V))
                lib.llama_sampler_chain_add(chain, smpl)
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            for t in list(row.prompt) + list(row.generated):
                lib.llama_sampler_accept(chain, int(t))
            buf = _token_buffer(row.logits)
            arr = lib.llama_token_data_array((lib.llama_token_data * V).from_buffer(buf), V, -1, False)
            lib.llama_sampler_apply(chain, ctypes.byref(arr))
            if logits:
                c = _candidates(arr)
                out = torch.full((V,), float("-inf"), dtype=torch.float32)
                out[torch.from_numpy(c["id"].astype(np.int64))] = torch.from_numpy(c["logit"])
                return out
            return _softmax_of(arr, V)
        finally:
            lib.llama_sampler_free(chain)

    def draw_tokens(self, row: Row, seeds: Sequence[int]) -> list:
        """The first token of ``row`` for each seed, each seed a new request (a fresh ``dist`` sampler).

        One chain holds the row's samplers for every seed; only ``dist`` is replaced per seed
        (``llama_sampler_chain_remove``, then ``llama_sampler_init_dist``), and the token array is
        restored from the row's logits each time: the same calls as :meth:`step` without the
        per-seed chain build. A row with XTC (whose generator sits mid-chain) takes :meth:`step`.

        Returns
        -------
        list of int
        """
        lib = self.lib
        stages = chain_stages(row, self.order)
        miro = self.mirostat_args(row)
        if any(n == "xtc" for n, _ in stages):
            return [self.step([row.replace(seed=int(s), slot=0, request_id=("draw", i))])[0].token
                    for i, s in enumerate(seeds)]
        x = row.logits.detach().to(torch.float32).cpu()
        V = int(x.shape[0])
        template = _token_buffer(x)
        buf = template.copy()
        data = (lib.llama_token_data * V).from_buffer(buf)
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        out = []
        try:
            for name, args in stages:
                lib.llama_sampler_chain_add(chain, self._make(name, args, V))
            for t in list(row.prompt) + list(row.generated):
                lib.llama_sampler_accept(chain, int(t))
            n = lib.llama_sampler_chain_n(chain)
            for s in seeds:
                seed = engine_seed(int(s))   # the low 32 bits of the seed's pattern, as for a row
                engine = DEFAULT_SEED if seed is None else seed
                lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(engine) if miro is None
                                            else self._mirostat(miro, engine, V))
                np.copyto(buf, template)
                arr = lib.llama_token_data_array(data, V, -1, False)
                lib.llama_sampler_apply(chain, ctypes.byref(arr))
                if arr.selected < 0 or arr.selected >= arr.size:
                    raise RowError("no_valid_token", f"llama.cpp selected index {arr.selected} of {arr.size}")
                out.append(int(arr.data[arr.selected].id))
                lib.llama_sampler_free(lib.llama_sampler_chain_remove(chain, n))
        finally:
            lib.llama_sampler_free(chain)
        return out

    def step(self, rows: Sequence[Row]) -> list:
        """One step: every row through its own chain (the module docstring).

        Returns
        -------
        list of RowResult
            One per row; ``duplicate_slot`` / ``bad_logits`` for rows the admission check
            rejects, ``no_valid_token`` when ``dist`` selects nothing (no candidates).
        """
        used: set = set()
        out = []
        for row in rows:
            try:
                claim_slot(row, used)
                out.append(self._one(row))
            except RowError as e:
                out.append(RowResult.failed(e))
        return out
