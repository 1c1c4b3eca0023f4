"""The fused GPU sampler (Triton kernels) as an implementation under test.

Pipeline of :meth:`FusedSession.step`, in order:

1. per row on the host, as an engine does at admission: the slot check, a too-short grammar
   bitmask, NaN logits (``nan_logits``, before the parameters as the profile orders them), the
   fused sampler's own validation and mode resolution (:func:`impls.fused.admit.admit`),
   which turns unset parameters into the kernel's sentinels (a greedy row gets
   ``temperature = 0``), and the row's sparse rewrite entries
   (:func:`impls.fused.step.row_entries`: bias pairs, validated; the history, or
   its last ``penalty_last_n`` positions; single-token bans and the end ids under
   ``min_length``; the ids banned by multi-token bad words and no-repeat-ngram,
   matched on the host; the grammar bitmask and ``allowed_token_ids`` as one mask; a mirostat
   row's without its penalties and DRY);
2. per vocabulary size, the rows' custom logits processors on the device
   (:func:`impls.fused.step.custom_logits`: each kind's rule from :mod:`impls.processors`,
   run first, as TensorRT-LLM runs them on the model's logits), then the step's rewrite launch (:func:`impls.fused.step.prepare_step`:
   the allowed-ids mask, logit bias, repetition/presence/frequency penalties and bans,
   :mod:`impls.fused.step_kernel`), whose rewritten logits tell, on the device, which
   rows the kernel will reject (:func:`impls.fused.slots.row_flags`);
3. ``(seed, offset)`` per sampling row from its per-slot counters on the device
   (:class:`impls.fused.slots.SlotStreams`; a rejected row takes no offset), for the
   whole step at once, in row order;
4. the rest of :func:`impls.fused.step.fused_step` per vocabulary size (its rewrite
   launch already run), all on the device and without a host synchronisation:
   temperature (a dynamic one from the rewritten logits' entropy,
   :func:`impls.fused.temperature.dynamic_temperature`); the rows with one of llama.cpp's extra
   filters (``min_keep``, top-n-sigma, typical-p, XTC) take their whole filter chain in
   :func:`impls.fused.chain.apply_chain`, mirostat rows their cut at their slot's ``mu``
   (:mod:`impls.fused.mirostat`), a row whose dynamic temperature reached 0 its argmax alone, and
   reach the kernel as that outcome with its filters off; then min-p, top-k, top-p,
   greedy and the canonical draw (:mod:`impls.fused.kernel`), with the
   probabilities of the same filtering, a beam row's one step of width 1,
   then the drawn token's logprob, its rank and the top logprobs, read from the
   vector its ``logprobs_mode`` names (RAW logprobs by default), and its PROCESSED logprob;
5. mirostat's ``mu`` per slot from the drawn token's probability (:class:`impls.fused.mirostat.MuSlots`),
   and finish reasons on the device at the token the kernel drew (:func:`impls.fused.finish.finish_codes`).

Every stage is the fused package's own code; the reference is never called.
On a CPU the kernel runs under Triton's interpreter (``TRITON_INTERPRET=1``
must be set before Triton is imported; :meth:`FusedImpl.available` says so).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import torch

from ..base import LatencyBatch, Row, RowError, RowResult, claim_slot
from ..params import ERRORS, PARAMS, field_feature
from ..profiles import TRTLLM
from ..registry import Entry

__all__ = ["FusedImpl", "FusedSession", "FUSED_VERSION", "IMPLEMENTATIONS", "draw_filters"]

#: Bumped whenever the kernel's decisions change. 4: bias, penalties, bans and logprobs on the device.
#: 5: early accept (the same tokens; a new path, 5 ``accepted``, for rows drawn in the histogram launch; since
#: its H100 measurement only top-p rows without top-k, in batches of at most 64 rows by default).
#: 6: validation and modes (:mod:`.admit`), seeds (:mod:`.slots`) and finish reasons (:mod:`.finish`) are the
#: package's own code instead of the reference's.
#: 7: the grammar bitmask and ``allowed_token_ids`` (one mask in the rewrite launch), ``penalty_last_n`` (the
#: history's window), custom logits processors (run first, on the device), ``logprobs_mode``, DRY (penalties
#: matched on the host, subtracted in the rewrite launch), ``logprob_token_ids`` declared (the step computed
#: them already), dynamic temperature (:mod:`.temperature`).
#: 8: llama.cpp's extra filters, ``min_keep``, top-n-sigma, typical-p and XTC (:mod:`.chain`), and mirostat
#: (:mod:`.mirostat`).
FUSED_VERSION = "8"


#: The per-row filter arguments of :func:`impls.fused.ops.fused_sample` (:class:`impls.fused.admit.Admitted`
#: fields), by name, with their dtypes.
_PARAM_DTYPES = {"temperature": torch.float32, "top_k": torch.int64, "top_p": torch.float64, "min_p": torch.float32}




def _dynatemp(rows: Sequence[Row], device) -> tuple:
    """``(range, exponent)``: ``(B,)`` float64 ``dynatemp_range`` (0 unset: off) and ``dynatemp_exponent`` (1 unset)."""
    rng = [float(r.dynatemp_range) if r.dynatemp_range is not None else 0.0 for r in rows]
    exp = [float(r.dynatemp_exponent) if r.dynatemp_exponent is not None else 1.0 for r in rows]
    return (torch.tensor(rng, dtype=torch.float64, device=device),
            torch.tensor(exp, dtype=torch.float64, device=device))


def draw_filters(y: torch.Tensor, adms: Sequence, rows: Sequence[Row], args: dict, device, mu=None) -> tuple:
    """The temperatures the kernel draws at, and the logits its filters read.

    Each row's float64 temperature (a dynamic one where set, but on a mirostat row:
    :func:`impls.fused.temperature.dynamic_temperature`); then the sampling rows that set one of llama.cpp's
    extra filters take :func:`impls.fused.chain.apply_chain`, and mirostat rows their cut
    (:func:`impls.fused.mirostat.mirostat_keep`, at their slot's ``mu``); the kernel draws from their outcome
    with their top-k, top-p and min-p turned off in ``args`` (in place). A row whose dynamic temperature
    reached 0 keeps its first finite argmax alone, at ``T = 1``.

    Parameters
    ----------
    y : torch.Tensor
        ``(B, V)`` float32 rewritten logits.
    adms, rows : sequence
        The rows' :class:`impls.fused.admit.Admitted` and :class:`impls.base.Row`, in ``y``'s order.
    args : dict
        ``(B,)`` tensors ``top_k``, ``top_p``, ``min_p`` of :data:`_PARAM_DTYPES`, modified for those rows.
    mu : impls.fused.mirostat.MuSlots, optional
        The session's mirostat states; None: every mirostat row is a new sampler (``mu = 2 * tau``).

    Returns
    -------
    (torch.Tensor, torch.Tensor or None, tuple or None)
        ``(B,)`` float32 temperatures; the ``filtered`` logits of :func:`impls.fused.step.fused_step`, or None
        when no row needs them; for mirostat rows ``(pick, slots, keys, mu, tau, eta)`` (their ``(R,)`` int64
        indices, slots and sampler keys, the float32 state and settings) for
        :meth:`impls.fused.mirostat.MuSlots.update`, else None.
    """
    from .admit import SAMPLING
    from .chain import apply_chain, chain_params, needs_chain
    from .mirostat import mirostat_keep
    from .temperature import dynamic_temperature
    t64 = torch.tensor([a.temperature for a in adms], dtype=torch.float64, device=device)
    dyn = [r if not a.mirostat else r.replace(dynatemp_range=None) for a, r in zip(adms, rows)]
    if any(r.dynatemp_range is not None and r.dynatemp_range > 0 for r in dyn):
        t64 = dynamic_temperature(y, t64, *_dynatemp(dyn, device))
    temp = t64.to(torch.float32)
    ext = [j for j, a in enumerate(adms) if a.mode == SAMPLING and needs_chain(a)]
    miro = [j for j, a in enumerate(adms) if a.mode == SAMPLING and a.mirostat]
    cold = [j for j, (a, r) in enumerate(zip(adms, dyn)) if a.mode == SAMPLING and (r.dynatemp_range or 0) > 0]
    if not ext and not miro and not cold:
        return temp, None, None
    filtered, state = y, None
    if ext:
        pick = torch.tensor(ext, dtype=torch.int64, device=device)
        filtered, t_ext = apply_chain(y, pick, chain_params([adms[j] for j in ext], t64.index_select(0, pick)))
        temp.index_copy_(0, pick, t_ext)
    if (miro or cold) and filtered is y:
        filtered = y.clone()   # the rows below write their outcome into it
    if miro:
        pick = torch.tensor(miro, dtype=torch.int64, device=device)
        f32 = lambda name: torch.tensor([getattr(adms[j], name) for j in miro], dtype=torch.float32, device=device)
        tau, eta = f32("mirostat_tau"), f32("mirostat_eta")
        keys = [_mirostat_key(rows[j], adms[j]) for j in miro]
        slots = [rows[j].slot for j in miro]
        cur = (mu.current(slots, keys, [adms[j].mirostat_tau for j in miro]) if mu is not None else tau * 2)
        sub = y.index_select(0, pick)
        ok = torch.isfinite(sub).any(-1) & ~torch.isnan(sub).any(-1) & ~torch.isposinf(sub).any(-1)
        keep = mirostat_keep(torch.where(ok[:, None], sub, 0.0), temp.index_select(0, pick),
                             torch.tensor([adms[j].mirostat for j in miro], dtype=torch.int64, device=device), cur)
        filtered.index_copy_(0, pick, torch.where(ok[:, None] & ~keep, float("-inf"), sub))
        state = (pick, slots, keys, cur, tau, eta)
    if cold:
        # a dynamic temperature that reached 0 (SEMANTICS §1.5a): the reference's outcome is the first argmax of the
        # finite logits alone, at T = 1, a sampling row (its processed logits and logprobs are that one token's, not
        # a greedy row's); decided on the device, for every row that may reach it
        pick = torch.tensor(cold, dtype=torch.int64, device=device)
        zero = temp.index_select(0, pick) <= 0
        sub = filtered.index_select(0, pick)
        first = torch.argmax(y.index_select(0, pick), dim=-1, keepdim=True)
        one = torch.zeros_like(sub, dtype=torch.bool).scatter_(1, first, True)
        filtered.index_copy_(0, pick, torch.where(zero[:, None] & ~one, float("-inf"), sub))
        temp.index_copy_(0, pick, torch.where(zero, 1.0, temp.index_select(0, pick)))
    # (a cold row keeps its filters: on its one finite token they keep it)
    if ext or miro:
        both = torch.tensor(ext + miro, dtype=torch.int64, device=device)
        for name, off in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0)):
            args[name].index_fill_(0, both, off)
    return temp, filtered, state


def _rewritten_fields(row: Row) -> Row:
    """The row whose rewrites the step applies: a mirostat row (1 or 2, whatever its mode) without its penalties
    and DRY, which common's mirostat chain does not build (SEMANTICS §1.5a); any other row as it is."""
    if row.mirostat not in (1, 2):
        return row
    return row.replace(repetition_penalty=None, presence_penalty=None, frequency_penalty=None, dry_multiplier=None)


def _mirostat_key(row: Row, adm) -> tuple:
    """Who owns a slot's mirostat sampler: the request, its seed and settings (a new one: a new sampler)."""
    return (row.request_id, adm.seed, adm.mirostat, adm.mirostat_tau, adm.mirostat_eta)


def _nan_ids(row: Row) -> list:
    """The ids of the row's NaN logits that its grammar bitmask allows (ascending; ``[]``: none).

    Profile ``trtllm`` applies the bitmask to the model's logits (``token_bitmask_stage = "logits"``), so a NaN
    under a 0 bit is banned before the NaN check sees it (SEMANTICS §1.4a, §5); ``allowed_token_ids`` is a
    rewrite, after the check.
    """
    from .step import bitmask_keep
    nan = torch.isnan(row.logits)
    if not bool(nan.any()):
        return []
    keep = bitmask_keep(row, row.logits.device)
    return torch.nonzero(nan if keep is None else nan & keep).flatten().tolist()


def _triton_state(device: str) -> Optional[str]:
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "on a CPU the fused kernel needs TRITON_INTERPRET=1 set before the run starts"
    if device.startswith("cuda") and not torch.cuda.is_available():
        return "no CUDA device"
    if device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 is set: compiled GPU kernels need a process without it"
    try:
        from . import ops  # reads SAMPCHECK_FUSED_TUNING (checked on every device) when first imported
    except ValueError as e:   # a bad SAMPCHECK_FUSED_TUNING: said once, not once per case
        return str(e)
    except Exception as e:    # e.g. a Triton too old for the kernels: a reason, not a crash of `list impls`
        return f"impls.fused.ops cannot be imported: {type(e).__name__}: {e}"
    if (device == "cpu") != ops.INTERPRETED:
        return ("Triton's mode (interpreter or compiled) was fixed when this process first imported the kernels, "
                "before TRITON_INTERPRET had its current value: start a new process")
    return None


def _row_result(row: Row, adm, o: dict, host: dict, j: int) -> RowResult:
    """Row ``j`` of :func:`impls.fused.step.fused_step`'s outputs ``o`` (``host``: the same, on the CPU) as a
    :class:`RowResult`: the kernel's rejection, or the token, its path, seed and offset (sampling rows), logprobs
    (the sampled token's, top-k with the token added when outside them, the vocabulary's vector where asked, the
    ids asked for) and finish reason."""
    from .admit import BEAM, GREEDY
    from .finish import REASONS
    from .kernel import STATUS_KINDS, PATHS
    kind = STATUS_KINDS[int(host["status"][j])]
    if kind is not None:
        return RowResult(error=kind, message=f"rejected by the fused kernel: {ERRORS[kind]}")
    t = int(host["tokens"][j])
    r = RowResult(token=t, mode=adm.mode, rewritten_logits=o["rewritten"][j], probs=o["probs"][j],
                  extra={"path": PATHS[int(host["path"][j])]})
    if adm.mode not in (GREEDY, BEAM):
        r.extra.update(seed=int(host["seed"][j]), offset=int(host["offset"][j]))
    lp_t = float(host["logprob"][j])
    r.logprob = lp_t
    r.processed_logprob = float(host["processed_logprob"][j])
    r.rank = int(host["rank"][j])
    if row.logprobs is not None and row.logprobs >= 0:
        k = min(int(row.logprobs), row.vocab)   # past V the kernel's list holds pads (id -1)
        top = [(int(a), float(b)) for a, b in zip(host["top_ids"][j][:k].tolist(),
                                                  host["top_logprobs"][j][:k].tolist())]
        if t not in [a for a, _ in top]:
            top.append((t, lp_t))
        r.top_logprobs = top
    vec = o["vector"][j] if o.get("vector") is not None else None
    r.raw_logprobs = vec
    r.vocab_logprobs = vec if row.logprobs == -1 else None
    if row.logprob_token_ids is not None:
        r.token_logprobs = [(int(a), float(host["vector"][j][int(a)])) for a in row.logprob_token_ids]
    r.finish_reason = REASONS[int(host["finish"][j])]
    return r


class FusedSession:
    """Per-slot state of the fused sampler (its seed counters, :class:`impls.fused.slots.SlotStreams`) and its step."""

    def __init__(self, device: str = "cpu"):
        from .mirostat import MuSlots
        from .slots import SlotStreams
        self.device = torch.device(device)
        self.streams = SlotStreams(self.device)
        self.mu = MuSlots(self.device)

    def step(self, rows: Sequence[Row]) -> list:
        """Sample one step; see the module docstring for the pipeline.

        Returns
        -------
        list of RowResult
        """
        from .admit import SAMPLING
        out: list = [None] * len(rows)
        staged = self._admit(rows, out)
        order = list(staged)
        groups, observed, drawable = self._rewrite(rows, staged, order)
        seeds, offsets = self.streams.take([rows[i].slot for i in order], [rows[i].request_id for i in order],
                                           [staged[i][0].seed for i in order],
                                           [staged[i][0].mode == SAMPLING for i in order], observed, drawable)
        for group in groups.values():
            self._draw(rows, staged, group, seeds, offsets, out)
        return out

    @staticmethod
    def _admit(rows: Sequence[Row], out: list) -> dict:
        """Stage 1: each row's slot claimed, bitmask checked, NaN refused, parameters admitted; ``{i: (Admitted,
        entries)}`` for the rows that pass, a failed :class:`RowResult` in ``out`` for the others."""
        from .admit import admit, check_bitmask
        from .step import row_entries
        staged = {}
        used = set()
        for i, row in enumerate(rows):
            try:
                claim_slot(row, used)
                check_bitmask(row)   # the mask applies to the model's logits, before the NaN check reads them
                nan = _nan_ids(row)
                if nan:
                    # before admission, as the profile orders it (a NaN row with a bad parameter is nan_logits)
                    raise RowError("nan_logits", f"NaN at token ids {nan[:5]}")
                staged[i] = (admit(row), row_entries(_rewritten_fields(row), row.vocab, TRTLLM))
            except RowError as e:
                out[i] = RowResult.failed(e)
        return staged

    def _rewrite(self, rows: Sequence[Row], staged: dict, order: list) -> tuple:
        """Stage 2, per vocabulary: the logits stacked and the rewrite launch run (bias, penalties, bans), which
        tells which rows take their slot (``observed``) and can draw (``drawable``: ``(len(order),)`` bool), on the
        device, so that a row the kernel rejects takes no offset. Returns ``(groups, observed, drawable)``,
        ``groups[V] = (idx, x, sub, inputs, pick, buf, want_vec)``."""
        from .slots import row_flags
        from .step import custom_logits, pack_entries, prepare_step
        by_vocab: dict = {}
        for i in order:
            by_vocab.setdefault(rows[i].vocab, []).append(i)
        groups = {}
        observed = torch.ones((len(order),), dtype=torch.bool, device=self.device)
        drawable = observed.clone()
        where = {i: j for j, i in enumerate(order)}
        for V, idx in by_vocab.items():
            logits = [custom_logits(rows[i], self.device) for i in idx]
            dt = logits[0].dtype if all(x.dtype == logits[0].dtype for x in logits) else torch.float32
            x = torch.stack([v.to(device=self.device, dtype=dt) for v in logits])
            if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                x = x.to(torch.float32)
            sub = [rows[i] for i in idx]
            inputs = pack_entries([staged[i][1] for i in idx], sub, self.device)
            want_vec = any(r.logprobs == -1 or r.logprob_token_ids is not None for r in sub)
            buf = prepare_step(x, inputs, want_probs=True, want_logprobs=True, want_vector=want_vec)
            pick = torch.tensor([where[i] for i in idx], dtype=torch.int64, device=self.device)
            observed[pick], drawable[pick] = row_flags(buf["y"])
            groups[V] = (idx, x, sub, inputs, pick, buf, want_vec)
        return groups, observed, drawable

    def _draw(self, rows: Sequence[Row], staged: dict, group: tuple, seeds: torch.Tensor, offsets: torch.Tensor,
              out: list) -> None:
        """Stages 4 and 5, one vocabulary's rows: filters (llama.cpp's chain, mirostat), the draw, logprobs and finish
        reasons on the device (:func:`impls.fused.step.fused_step`), mirostat's ``mu`` updated; a
        :class:`RowResult` per row in ``out``."""
        from .finish import finish_codes, pack_finish
        from .step import fused_step
        idx, x, sub, inputs, pick, buf, want_vec = group
        # one (batch,) tensor per argument of fused_step, by name
        args = {name: torch.tensor([getattr(staged[i][0], name) for i in idx], dtype=dt_, device=self.device)
                for name, dt_ in _PARAM_DTYPES.items()}
        args.update(seed=seeds[pick], offset=offsets[pick])
        args["temperature"], filtered, miro = draw_filters(buf["y"], [staged[i][0] for i in idx], sub, args,
                                                          self.device, self.mu)
        beam = [staged[i][0].beam_temperature for i in idx]
        beam_t = torch.tensor(beam, dtype=torch.float32, device=self.device) if max(beam) >= 0 else None
        o = fused_step(x, **args, inputs=inputs, want_probs=True, want_logprobs=True, want_vector=want_vec,
                       beam_temperature=beam_t, buffers=buf, rewritten=True, filtered=filtered)
        if miro is not None:   # mirostat's mu, from the drawn token's probability over the kept prefix
            pk, slots, keys, cur, tau, eta = miro
            tok = o["tokens"].index_select(0, pk)
            p_tok = o["probs"].index_select(0, pk).gather(1, tok.clamp_min(0)[:, None])[:, 0]
            self.mu.update(slots, keys, cur, tau, eta, p_tok, o["status"].index_select(0, pk) == 0)
        o["finish"] = finish_codes(o["tokens"], pack_finish(sub, self.device))
        o["seed"], o["offset"] = args["seed"], args["offset"]
        host = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in o.items()}
        for j, i in enumerate(idx):
            out[i] = _row_result(rows[i], staged[i][0], o, host, j)

    def sample_many(self, row: Row, seeds: Sequence[int], chunk: int = 4096) -> torch.Tensor:
        """``(V,)`` int64 counts of one draw per seed (offset 0), in batched launches.

        The row's custom processors, bias, penalties (none on a mirostat row) and bans are applied once (the
        rewrite launch, :func:`impls.fused.step.fused_rewrite`); only the filters and the draw repeat.

        Raises
        ------
        RowError
            If the row is rejected (by admission, its bias entries or the kernel).
        """
        from .admit import admit, signed_seed
        from .kernel import STATUS_KINDS
        from .ops import fused_sample
        from .step import custom_logits, fused_rewrite, pack_rows

        adm = admit(row)
        inputs, errs = pack_rows([_rewritten_fields(row)], row.vocab, self.device)
        if errs[0] is not None:
            raise errs[0]
        x = fused_rewrite(custom_logits(row, self.device).to(self.device)[None], inputs)
        V = x.shape[-1]
        params = {name: torch.tensor([getattr(adm, name)], dtype=dt_, device=self.device)
                  for name, dt_ in _PARAM_DTYPES.items()}
        temp, filtered, _ = draw_filters(x, [adm], [row], params, self.device)
        x = (x if filtered is None else filtered)[0]
        temp = float(temp[0])
        counts = torch.zeros(V, dtype=torch.int64)
        for start in range(0, len(seeds), chunk):
            part = [signed_seed(int(s)) for s in seeds[start:start + chunk]]
            n = len(part)
            full = lambda v, dt: torch.full((n,), v, dtype=dt, device=self.device)
            tok, status, _, _ = fused_sample(x.expand(n, V), temperature=full(temp, torch.float32),
                                             top_k=full(int(params["top_k"][0]), torch.int64),
                                             top_p=full(float(params["top_p"][0]), torch.float64),
                                             min_p=full(float(params["min_p"][0]), torch.float32),
                                             seed=torch.tensor(part, dtype=torch.int64, device=self.device),
                                             offset=full(0, torch.int64))
            bad = status != 0
            if bool(bad.any()):
                kind = STATUS_KINDS[int(status[bad][0])]
                raise RowError(kind, f"rejected by the fused kernel: {ERRORS[kind]}")
            counts += torch.bincount(tok.cpu(), minlength=V)
        return counts


class FusedImpl:
    """The fused Triton sampler behind the implementation protocol (profile ``trtllm``)."""

    name = "fused"
    profile = TRTLLM
    roles = frozenset({"conformance", "latency"})
    #: The single-step features its step expresses (no scenarios; :meth:`unsupported` names the row fields it
    #: leaves out).
    features = frozenset({
        "temperature", "top_k", "top_p", "min_p", "min_keep", "top_n_sigma", "typical_p", "xtc", "mirostat",
        "top_p_decay",
        "beam_search", "repetition_penalty",
        "presence_penalty", "frequency_penalty", "prompt_ignore_length", "penalty_last_n", "dry", "dynatemp",
        "logit_bias",
        "min_length", "bad_words", "no_repeat_ngram", "allowed_token_ids", "token_bitmask", "logits_processors",
        "end_id", "end_id_set", "ignore_eos", "stop_words", "max_new_tokens", "max_seq_len",
        "seed", "logprobs", "logprob_token_ids", "logprobs_mode", "processed_logits", "canonical_rng",
        "low_precision_logits", "finish_reason",
    })
    devices = frozenset({"cpu", "cuda"})
    #: Timed on a GPU only (on a CPU it runs under Triton's interpreter, a correctness tool).
    latency_devices = frozenset({"cuda"})
    slow = False
    #: Under Triton's interpreter a ``sample_many`` call draws about 4 tokens a second (64 and 256 rows of vocab 6
    #: and 1000: 3.3-4.6 draws/s, 2-core CPU, load 2, 2026-12-06), so a statistical check's 10^4-10^6 draws would
    #: take hours: ``n/a`` there, with this reason, instead of the 600 s case timeout's error.
    draw_limits = {"cpu": (1000, "the fused kernel under Triton's interpreter draws about 4 tokens a second; "
                                 "run statistical cases on a CUDA device")}
    #: Every stage of a single step is the fused package's: admission (:mod:`.admit`), the rewrites, filters,
    #: draw and logprobs (:mod:`.step_kernel`, :mod:`.kernel`), the seed counters (:mod:`.slots`) and the
    #: finish reasons (:mod:`.finish`).
    #: ``decode``: a row's decayed top-p from its history (:func:`.admit.decayed_top_p`); ``beam``: one beam step
    #: of width 1 (:func:`.step.fused_step`'s ``beam_temperature``). Scenarios (multi-step decoding, beams
    #: wider than 1) are not run (:attr:`features`).
    stages = {"validation": "own", "logit_bias": "own", "penalties": "own", "bans": "own",
              "filters": "own", "draw": "own", "seeds": "own", "logprobs": "own", "finish": "own",
              "decode": "own", "beam": "own"}

    def version(self) -> str:
        """Kernel rule version and the Triton version it runs on."""
        import triton
        return f"{FUSED_VERSION} (triton {triton.__version__})"

    def available(self, device: str) -> Optional[str]:
        """``None`` when the kernel can run on ``device``, else the reason."""
        return _triton_state(device)

    def describe(self, device: str = "cpu") -> dict:
        """Facts recorded with the run: the tuning constants the kernel runs with on ``device``.

        Returns
        -------
        dict
            ``tuning``: ``name=value`` pairs of :data:`impls.fused.ops.DEFAULTS` on a GPU (with
            ``SAMPCHECK_FUSED_TUNING`` applied), of :data:`impls.fused.ops.INTERPRETER` on a CPU (Triton's
            interpreter: small blocks and workspaces, which that variable does not change; a GPU before Hopper
            without ``pdl``, as :func:`impls.fused.launch.device_cfg` gives its calls); ``tuning_env``, when the
            variable is set: its value and whether it applies here (it is checked on every device).
        """
        from . import launch, ops
        on_gpu = device.startswith("cuda")
        cfg = ops.DEFAULTS if on_gpu else ops.INTERPRETER
        if on_gpu and torch.cuda.is_available():   # a GPU before Hopper launches without PDL, as its calls do
            cfg = launch.device_cfg(cfg, torch.device(device))
        facts = {"tuning": ",".join(f"{k}={v}" for k, v in cfg.items())}
        env = os.environ.get(ops.TUNING_ENV)
        if env:
            facts["tuning_env"] = f"{ops.TUNING_ENV}={env!r}: " + (
                "applied" if on_gpu else "checked but not applied on a CPU (it tunes GPU calls; the interpreter's "
                                         "constants are used)")
        return facts

    def unsupported(self, row: Row) -> Optional[str]:
        """``None`` for a row the device step expresses; else why not: a field it sets whose feature
        (:func:`impls.params.field_feature`) is not in :attr:`features` (a scenario's fields), so
        that a row given through the API, not a case, is never sampled with one of its fields ignored; and
        ``logprobs_mode = "processed_logits"`` on a row whose XTC may draw from a mixture (``0 <
        xtc_probability < 1``): the kernel's processed logits are then the mixture's log-probabilities, not the
        reference's ``x / T`` on the union of the two kept sets.
        """
        xp = row.xtc_probability
        if row.logprobs_mode == "processed_logits" and xp is not None and 0 < xp < 1:
            return (f"logprobs_mode='processed_logits' with xtc_probability={xp!r}: the fused step draws XTC's "
                    "mixture from its log-probabilities and has no processed logits for it")
        for p in PARAMS:
            if not p.row_field or p.feature is None:
                continue
            v = getattr(row, p.name, None)
            if v is None or (p.factory is not None and v == p.factory()) or v == p.default:
                continue
            feature = field_feature(p.name, v)
            if feature is not None and feature not in self.features:
                return f"{p.name}={v!r}: feature {feature!r} is not one the fused step expresses"
        return None

    def open_session(self, device: str = "cpu") -> FusedSession:
        """A fresh :class:`FusedSession`."""
        return FusedSession(device)

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=True)``: a :class:`impls.fused.bound.FusedSampler` bound to the mix's per-row tensors.

        As an engine keeps a batch's parameters in device tensors it updates in place, the sampler checks them
        and allocates its outputs and workspace once here; a call checks the logits and launches. A batch
        whose every row is greedy (temperature 0, top-k 1, top-p 0 or min-p 1) passes the all-greedy hint, as an
        engine knows it from its requests (vLLM: ``SamplingMetadata.all_greedy``). Logits of another shape than
        the first call's (the suite hands none) raise ``ValueError``.
        """
        from .bound import FusedSampler
        T, K, P, M = batch.tensors()
        seed, off = batch.seeds()
        greedy = all(t == 0 or k == 1 or p == 0 or m == 1 for t, k, p, m in batch.params)
        return FusedSampler(T, K, P, M, seed, off, greedy=greedy), True


IMPLEMENTATIONS = (Entry("fused", FusedImpl),)
