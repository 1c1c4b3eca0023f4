"""One whole single-step sampler on the device: rewrites, filters and draw, logprobs (profile ``trtllm``).

:func:`fused_step` launches, on the logits' stream and without a host
synchronisation: the rewrite launch (:mod:`impls.fused.step_kernel`), the
filter and draw launches of :mod:`impls.fused.kernel` on the rewritten
float32 logits, and the logprobs launch. Every per-row input is a tensor of
fixed shape (``(B,)``, ``(B, NU)``, ``(B, 12)``), so a call can be captured
in a CUDA graph once its :class:`StepInputs` and its workspace
(:func:`allocate_step`) are kept and rewritten in place.

:func:`pack_rows` is the thin host side: it turns each row's request fields
into the sparse entries the rewrite launch takes. The per-row rules stay on
the device (which history positions count for presence/frequency, whether
``min_length`` still bans the end ids, the arithmetic); the host only lists:

* the logit bias, in the request's order (validated here: an id outside
  ``[0, V)`` or a NaN value is ``invalid_logit_bias``, as
  :func:`impls.reference.rewrites.apply_logit_bias`);
* the history ``prompt + generated`` (its last ``penalty_last_n`` positions) when a
  penalty is active (``r != 1 or a != 0 or f != 0``, §1.3);
* the one-token bad words, the end ids (tagged: banned on the device while
  ``generated + draft_position < min_length``), and the ids banned by
  **multi-token** bad words whose prefix ends the history and by
  **no-repeat-ngram**: both need a match of a token sequence against the
  history, done here from the history as an index list (the same rules as
  :mod:`impls.reference.bans`: SEMANTICS §1.4, profile ``trtllm``:
  ``bad_words_see_prompt``, ``min_length`` counts generated tokens only);
* the DRY penalties (:func:`dry_penalties`: a match of the history's end against
  its earlier stretches, done here), one value per penalised id;
* the grammar bitmask and ``allowed_token_ids`` as one allowed-ids mask
  (:func:`allowed_words`), dense, ``ceil(V / 32)`` words a row.

Workspace per row (stated for :func:`allocate_step`): the rewritten logits
``V`` float32, the filters' workspace (:func:`impls.fused.workspace.allocate`,
independent of ``V`` but for the parts ``S``), ``2 S`` float32 log-softmax
partials, 4 int32 counters, ``S * KL`` int64 top-logprob candidates, and the
outputs (``KL`` top ids and logprobs; ``V`` float32 with the whole vector).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from .. import processors
from ..base import Row, RowError
from ..params import end_id_set
from ..profiles import Profile, TRTLLM
from .kernel import launch_specs
from .launch import quiet_interpreter, run_call
from .ops import DEFAULTS, INTERPRETER, check_call
from .step_kernel import (LP_MODES, META_F, META_I, TAG_BAN, TAG_BIAS, TAG_DRY, TAG_EOS_MIN_LENGTH, TAG_HISTORY,
                          _kth_kernel, _logprobs_kernel, _rewrite_kernel)
from .workspace import allocate

__all__ = ["StepInputs", "row_entries", "allowed_words", "bitmask_keep", "custom_logits", "dry_penalties",
           "pack_entries", "pack_rows", "fused_rewrite", "allocate_step", "prepare_step",
           "fused_step", "host_bans", "penalty_active", "pow2", "launch_count"]


def pow2(n: int, floor: int = 16) -> int:
    """The smallest power of two ``>= max(n, floor)`` (Triton block sizes)."""
    n = max(int(n), floor)
    return 1 << (n - 1).bit_length()


def penalty_active(row: Row) -> bool:
    """Whether an occurrence penalty changes logits: ``r != 1 or a != 0 or f != 0`` (SEMANTICS §1.3)."""
    r, a, f = row.repetition_penalty, row.presence_penalty, row.frequency_penalty
    return (r is not None and r != 1.0) or bool(a) or bool(f)


def host_bans(row: Row, V: int, profile: Profile = TRTLLM) -> list:
    """The ids banned by sequence matches on the history: multi-token bad words and no-repeat-ngram.

    Parameters
    ----------
    row : Row
    V : int
        Vocabulary size; banned ids outside ``[0, V)`` are dropped for no-repeat-ngram.
    profile : Profile
        Reads ``bad_words_see_prompt`` (trtllm: the prefix may lie in the prompt).

    Returns
    -------
    list of int
        The last id of every bad word of length ``>= 2`` whose other ids end ``prompt + generated``
        (or ``generated``), then the last id of every earlier n-gram of the history that starts
        with its last ``n - 1`` tokens (``no_repeat_ngram_size = n``; ``n = 1``: every seen id).

    Source: SEMANTICS §1.4; the same rules as :func:`impls.reference.bans.bad_word_bans` and
    :func:`impls.reference.bans.no_repeat_ngram_bans` (one-token words go to the device as
    unconditional bans instead).
    """
    out = []
    hist = (list(row.prompt) if profile.bad_words_see_prompt else []) + list(row.generated)
    for w in row.bad_words or ():
        w = [int(t) for t in w]
        if len(w) < 2:
            continue
        pre = w[:-1]
        if len(hist) >= len(pre) and hist[len(hist) - len(pre):] == pre:
            out.append(w[-1])
    n = row.no_repeat_ngram_size
    if n and n > 0:
        full = list(row.prompt) + list(row.generated)
        if len(full) >= n:
            pre = full[len(full) - (n - 1):] if n > 1 else []
            for i in range(len(full) - n + 1):
                if full[i:i + n - 1] == pre and 0 <= full[i + n - 1] < V:
                    out.append(full[i + n - 1])
    return out


def custom_logits(row: Row, device) -> torch.Tensor:
    """The ``(V,)`` logits the rewrite launch reads for ``row``: after its custom logits processors, if any.

    Profile ``trtllm`` runs a request's processors first, on the model's logits (every row, greedy
    included), before the sampler's bias, penalties and bans (``rewrite_order`` starts with ``"custom"``:
    TensorRT-LLM ``PyTorchModelEngine.forward``, ``_execute_logit_post_processors``, SEMANTICS §1.4b); the
    model's logits already carry the grammar bitmask (``token_bitmask_stage = "logits"``), so a processor
    sees its bans. Each kind's rule is :meth:`impls.processors.Processor.apply`, at the request's steps
    (:func:`impls.processors.steps`), in float32 (the working dtype) on ``device``; the rewrite launch then
    applies the bitmask again (a no-op) with ``allowed_token_ids``.

    Returns
    -------
    torch.Tensor
        ``row.logits`` itself (on its device, its dtype) without processors; else a new float32 tensor on
        ``device``.
    """
    if not row.logits_processors:
        return row.logits
    x = row.logits.to(device=device, dtype=torch.float32)
    keep = bitmask_keep(row, device)
    if keep is not None:
        x = x.masked_fill(~keep, float("-inf"))
    return processors.apply_all(x, row.logits_processors, processors.steps(row))


def bitmask_keep(row: Row, device) -> Optional[torch.Tensor]:
    """The ids the row's grammar bitmask alone allows, as a ``(V,)`` bool tensor on ``device``; None without one.

    The bits of :func:`allowed_words` (``allowed_token_ids`` left out: a rewrite, not the model's logits), for the
    host's NaN check and :func:`custom_logits`, which see the model's logits as profile ``trtllm`` masks them
    (``token_bitmask_stage = "logits"``, SEMANTICS §1.4a).

    Raises
    ------
    ValueError
        As :func:`allowed_words`.
    """
    if row.token_bitmask is None:
        return None
    V = row.logits.shape[-1]
    words = torch.tensor(allowed_words(row.replace(allowed_token_ids=None), V), dtype=torch.int64, device=device)
    j = torch.arange(V, device=device)
    return ((words[j >> 5] >> (j & 31)) & 1) != 0


def _z_array(s: list) -> list:
    # z[k] = length of the longest common prefix of s and s[k:] (z[0] = len(s)); the Z-algorithm, O(len(s))
    n = len(s)
    z = [0] * n
    if n:
        z[0] = n
    lo = hi = 0
    for k in range(1, n):
        if k < hi:
            z[k] = min(hi - k, z[k - lo])
        while k + z[k] < n and s[z[k]] == s[k + z[k]]:
            z[k] += 1
        if k + z[k] > hi:
            lo, hi = k, k + z[k]
    return z


def _dry_limit(window: list, breakers: list) -> int:
    # the longest repetition DRY may see: the tokens after the most recent sequence breaker (its first token at
    # the scanned position, the rest following it inside the window), the longest breaker there; none: all.
    # Breakers are looked up by their first token: one dict lookup per position, not a scan of every breaker
    L = len(window)
    by_first: dict = {}
    for b in breakers:
        by_first.setdefault(b[0], []).append(b)
    for i in range(L):
        start = L - 1 - i
        cands = by_first.get(window[start])
        if not cands:
            continue
        tails = [len(b) - 1 for b in cands if len(b) - 1 <= i and window[start + 1:start + len(b)] == b[1:]]
        if tails:
            return i - max(tails)
    return L


def dry_penalties(row: Row, V: int) -> list:
    """The DRY penalty of each id that would extend a repetition of the history's end (SEMANTICS §1.3).

    Over the window, the last ``dry_penalty_last_n`` tokens of ``prompt + generated`` (unset: all), an earlier
    occurrence ending ``k`` tokens before the end repeats the window's final ``n`` tokens, ``n`` the ``k``-th value
    of the Z-array of the reversed window (llama.cpp computes the same lengths with a reverse Z-algorithm), capped
    by the restart limit of ``dry_sequence_breakers``; the token that followed it, ``window[L - k]``, is penalised
    ``dry_multiplier * dry_base ** min(n - dry_allowed_length, cap)`` for its longest ``n >= dry_allowed_length``
    (``cap = floor(88.7228391 / ln base)`` in float32 when ``base > 1.000001``, else no cap). Off unless
    ``dry_multiplier != 0``, ``dry_base >= 1``, the window is not 0 and longer than ``dry_allowed_length``; ids
    outside ``[0, V)`` and one-token breakers are never penalised.

    Returns
    -------
    list of (int, float)
        ``(id, penalty)`` by ascending id; the rewrite launch subtracts each in float32, unclamped.

    Source: ggml-org/llama.cpp ``llama_sampler_dry_apply`` (llama-cpp-python 0.3.36's bundle: defaults base 1.75,
    allowed length 2, common/common.h).
    """
    m = row.dry_multiplier
    base = 1.75 if row.dry_base is None else row.dry_base
    allowed = 2 if row.dry_allowed_length is None else row.dry_allowed_length
    last_n = row.dry_penalty_last_n
    if not m or not base >= 1 or last_n == 0:
        return []
    full = list(row.prompt) + list(row.generated)
    window = full[max(len(full) - last_n, 0):] if last_n is not None else full
    L = len(window)
    breakers = [list(b) for b in row.dry_sequence_breakers or ()]
    limit = _dry_limit(window, breakers) if L > allowed else -1
    if limit < allowed:
        return []
    z = _z_array(window[::-1])
    longest = {}
    for k in range(1, L):
        n = min(z[k], limit)
        if n >= allowed:
            t = window[L - k]
            longest[t] = max(longest.get(t, n), n)
    cap = int(np.float32(88.7228391) / np.log(np.float32(base))) if base > 1.000001 else 0
    single = {b[0] for b in breakers if len(b) == 1}
    return [(t, m * base ** (min(n - allowed, cap) if cap > 0 else n - allowed))
            for t, n in sorted(longest.items()) if 0 <= t < V and t not in single]


@dataclass
class StepInputs:
    """The per-row tensors of the rewrite launch (fixed shapes: rewrite them in place to replay a graph).

    Attributes
    ----------
    ids : torch.Tensor
        ``(B, NU)`` int32 token ids of the sparse entries (``-1`` pads).
    vals : torch.Tensor
        ``(B, NU)`` float32 bias values (0 elsewhere).
    tags : torch.Tensor
        ``(B, NU)`` int32 :data:`impls.fused.step_kernel.TAG_BIAS` ... (0 pads).
    meta_i : torch.Tensor
        ``(B, 12)`` int32 (:data:`impls.fused.step_kernel.META_I`).
    meta_f : torch.Tensor
        ``(B, 4)`` float32 repetition, presence, frequency penalty.
    n_top : torch.Tensor
        ``(B,)`` int32 top logprobs asked per row (0: none).
    max_top : int
        The largest of ``n_top``, kept on the host (sizes the top-logprob workspace without reading
        the device).
    mask : torch.Tensor or None
        ``(B, ceil(V / 32))`` int32 allowed-ids words (:func:`allowed_words`; ``-1``, every bit set, on a row
        without one); None: no row of the batch has one (the launch is compiled without the mask and reads none).
    modes : bool
        Whether a row's ``logprobs_mode`` (``meta_i`` column 3) is not ``raw_logprobs``, kept on the host (the
        logprobs launch is compiled with the other modes only then).
    """

    ids: torch.Tensor
    vals: torch.Tensor
    tags: torch.Tensor
    meta_i: torch.Tensor
    meta_f: torch.Tensor
    n_top: torch.Tensor
    max_top: int = 0
    mask: Optional[torch.Tensor] = None
    modes: bool = False

    @property
    def NU(self) -> int:
        """Entries per row (a power of two >= 16)."""
        return self.ids.shape[1]


def _row_entries(row: Row, V: int, profile: Profile) -> tuple:
    ids, vals, tags = [], [], []
    for tok, val in row.logit_bias or ():
        if not 0 <= int(tok) < V or val != val:
            raise RowError("invalid_logit_bias",
                           f"logit_bias entry ({tok}, {val}): id must be in [0, {V}) and value not NaN")
        ids.append(int(tok))
        vals.append(float(val))
        tags.append(TAG_BIAS)
    n_bias = len(ids)
    full = list(row.prompt) + list(row.generated)
    # penalty_last_n: only the window of the last n positions is penalised (0: no penalty, §1.3); the kernel
    # sees the window as the whole history, its prompt part and ignored prefix shifted to the window's start
    start = 0 if row.penalty_last_n is None else max(len(full) - int(row.penalty_last_n), 0)
    hist = full[start:] if penalty_active(row) and row.penalty_last_n != 0 else []
    prompt_len = max(len(row.prompt) - start, 0)
    ignored = max(min(max(int(row.prompt_ignore_length or 0), 0), len(row.prompt)) - start, 0)
    # an id outside [0, V) counts for nothing (trtllm: history_out_of_range "ignore") but keeps its position
    # (prompt_ignore_length counts positions); -1 is the kernel's "no token" and fits int32 where 2**40 would not
    ids += [int(t) if 0 <= t < V else -1 for t in hist]
    vals += [0.0] * len(hist)
    tags += [TAG_HISTORY] * len(hist)
    bans = [int(w[0]) for w in row.bad_words or () if len(w) == 1] + host_bans(row, V, profile)
    ids += bans
    vals += [0.0] * len(bans)
    tags += [TAG_BAN] * len(bans)
    eos = [t for t in end_id_set(row.end_id) if 0 <= t < V] if row.min_length else []
    ids += eos
    vals += [0.0] * len(eos)
    tags += [TAG_EOS_MIN_LENGTH] * len(eos)
    gen = len(row.generated) + int(row.draft_position or 0)
    dry = dry_penalties(row, V)
    ids += [t for t, _ in dry]
    vals += [v for _, v in dry]
    tags += [TAG_DRY] * len(dry)
    words = allowed_words(row, V)
    mode = row.logprobs_mode or "raw_logprobs"
    if mode not in LP_MODES:
        raise ValueError(f"unknown logprobs_mode {mode!r}; known: {', '.join(LP_MODES)}")
    meta = [len(ids), n_bias, len(hist), LP_MODES[mode], prompt_len, ignored, gen, int(row.min_length or 0),
            len(dry), 0, 0, 0]
    pen = [1.0 if row.repetition_penalty is None else float(row.repetition_penalty),
           float(row.presence_penalty or 0.0), float(row.frequency_penalty or 0.0), 0.0]
    return ids, vals, tags, meta, pen, words


def allowed_words(row: Row, V: int) -> Optional[list]:
    """The row's allowed-ids mask as ``ceil(V / 32)`` int32 words (bit ``j % 32`` of word ``j // 32``), or None.

    The grammar bitmask (``token_bitmask``, profile ``trtllm``: ``token_bitmask_stage = "logits"``, applied to
    the model's logits before the sampler) and ``allowed_token_ids`` (the first rewrite of its
    ``rewrite_order``) both only ban, and both come before the logit bias and every other rewrite, so one
    mask, their intersection, applied as the rewrite launch reads the logits, is both (SEMANTICS §1.4a).
    Ids outside ``[0, V)`` in ``allowed_token_ids`` are rejected by admission first
    (:func:`impls.fused.admit.admit`).

    Returns
    -------
    list of int or None
        Signed int32 bit patterns; None when the row has neither.

    Raises
    ------
    ValueError
        A ``token_bitmask`` of fewer than ``ceil(V / 32)`` words (admission rejects such a row first:
        ``invalid_token_bitmask``).
    """
    if row.token_bitmask is None and row.allowed_token_ids is None:
        return None
    n = (V + 31) // 32
    if row.token_bitmask is not None and len(row.token_bitmask) < n:
        raise ValueError(f"token_bitmask has {len(row.token_bitmask)} words; a vocabulary of {V} needs {n}")
    # words past ceil(V / 32) are ignored, as the reference reads them (impls.params.bitmask_allows)
    words = [int(w) & 0xFFFFFFFF for w in row.token_bitmask[:n]] if row.token_bitmask is not None else [0xFFFFFFFF] * n
    if row.allowed_token_ids is not None:
        listed = [0] * n
        for t in row.allowed_token_ids:
            if 0 <= int(t) < V:
                listed[int(t) >> 5] |= 1 << (int(t) & 31)
        words = [a & b for a, b in zip(words, listed)]
    return [w - (1 << 32) if w >= 1 << 31 else w for w in words]


def row_entries(row: Row, V: int, profile: Profile = TRTLLM) -> tuple:
    """One row's sparse rewrite entries and parameters (the host's part of :func:`pack_rows`).

    Returns
    -------
    tuple
        ``(ids, values, tags, meta_i, meta_f, mask)``: Python lists (the rows of :class:`StepInputs`), ``mask``
        None or :func:`allowed_words`.

    Raises
    ------
    RowError
        ``invalid_logit_bias`` for a bias id outside ``[0, V)`` or a NaN value (SEMANTICS §1.2,
        :func:`impls.reference.rewrites.apply_logit_bias`'s rule).
    """
    return _row_entries(row, V, profile)


def pack_entries(entries: Sequence[tuple], rows: Sequence[Row], device, NU: Optional[int] = None) -> StepInputs:
    """:class:`StepInputs` from each row's :func:`row_entries` (``None``: a row packed with no entries).

    Parameters
    ----------
    entries : sequence of tuple or None
    rows : sequence of Row
        The same rows (their ``logprobs`` give ``n_top``).
    device : torch.device or str
    NU : int, optional
        Entries per row (a power of two); default the smallest that holds every row's, at least 64.

    Raises
    ------
    ValueError
        A given ``NU`` smaller than a row's entries.
    """
    empty = ([], [], [], [0] * META_I, [1.0, 0.0, 0.0, 0.0], None)
    packed = [e if e is not None else empty for e in entries]
    need = max([len(p[0]) for p in packed] + [1])
    if NU is None:
        NU = pow2(need, 64)   # at least 64: fewer compiled variants (NU is a constexpr)
    elif need > NU:
        raise ValueError(f"a row has {need} sparse entries, more than NU = {NU}")
    B = len(packed)
    ids = torch.full((B, NU), -1, dtype=torch.int32)
    vals = torch.zeros((B, NU), dtype=torch.float32)
    tags = torch.zeros((B, NU), dtype=torch.int32)
    words = [p[5] for p in packed]
    mask = None
    if any(w is not None for w in words):
        mw = max(len(w) for w in words if w is not None)
        mask = torch.full((B, mw), -1, dtype=torch.int32)
        for i, w in enumerate(words):
            if w is not None:
                mask[i, :len(w)] = torch.tensor(w, dtype=torch.int32)
    for i, (a, v, t, _m, _p, _w) in enumerate(packed):
        if a:
            ids[i, :len(a)] = torch.tensor(a, dtype=torch.int32)
            vals[i, :len(v)] = torch.tensor(v, dtype=torch.float32)
            tags[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
    meta_i = torch.tensor([p[3] for p in packed], dtype=torch.int32).reshape(B, META_I)
    meta_f = torch.tensor([p[4] for p in packed], dtype=torch.float32).reshape(B, META_F)
    n_top = torch.tensor([max(int(r.logprobs), 0) if r.logprobs is not None else 0 for r in rows], dtype=torch.int32)
    dev = torch.device(device)
    return StepInputs(ids.to(dev), vals.to(dev), tags.to(dev), meta_i.to(dev), meta_f.to(dev), n_top.to(dev),
                      int(n_top.max()) if B else 0, None if mask is None else mask.to(dev),
                      any(p[3][3] != 0 for p in packed))


def pack_rows(rows: Sequence[Row], V: int, device, profile: Profile = TRTLLM, NU: Optional[int] = None) -> tuple:
    """Host side of a step: each row's sparse rewrite entries and parameters as fixed-shape tensors.

    Parameters
    ----------
    rows : sequence of Row
        Rows of one vocabulary size ``V`` (already validated by mode resolution).
    V : int
    device : torch.device or str
    profile : Profile
        trtllm (the fused sampler's profile).
    NU : int, optional
        Entries per row (:func:`pack_entries`).

    Returns
    -------
    (StepInputs, list)
        The inputs, and per row ``None`` or the :class:`~impls.base.RowError` that rejects it
        (``invalid_logit_bias``); a rejected row is packed with no entries.

    Raises
    ------
    ValueError
        A given ``NU`` smaller than a row's entries.
    """
    entries, errors = [], []
    for row in rows:
        try:
            entries.append(_row_entries(row, V, profile))
            errors.append(None)
        except RowError as e:
            entries.append(None)
            errors.append(e)
    return pack_entries(entries, rows, device, NU), errors


def fused_rewrite(logits: torch.Tensor, inputs: StepInputs) -> torch.Tensor:
    """The rewrite launch alone: ``(B, V)`` float32 logits after the allowed-ids mask, bias, penalties (DRY
    included) and bans (the custom logits processors, run before it, are the caller's: :func:`custom_logits`).

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, V)`` float32/bfloat16/float16 (CUDA, or CPU under Triton's interpreter).
    inputs : StepInputs
        :func:`pack_rows` of the ``B`` rows.

    Returns
    -------
    torch.Tensor
        ``(B, V)`` float32, a new tensor.
    """
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    B, V = logits.shape
    cfg = INTERPRETER if logits.device.type == "cpu" else DEFAULTS
    from .workspace import splits
    S, CH = splits(B, V, cfg)
    y = torch.empty((B, V), dtype=torch.float32, device=logits.device)
    dummy_f = torch.empty((1,), dtype=torch.float32, device=logits.device)
    dummy_i = torch.empty((1,), dtype=torch.int32, device=logits.device)
    _launch_rewrite(logits, inputs, y, dummy_f, dummy_i, S, CH, cfg, False)
    return y


def _launch_rewrite(logits, inputs: StepInputs, y, lpw, lpc, S: int, CH: int, cfg: dict, want_lp: bool) -> None:
    # the rewrite launch of fused_rewrite and prepare_step: (B, V) logits -> y; with want_lp also the RAW
    # logprobs' per-part row statistics into lpw/lpc
    B, V = logits.shape
    if B:
        mask = inputs.mask if inputs.mask is not None else inputs.meta_i   # a placeholder the launch never reads
        with quiet_interpreter():
            _rewrite_kernel[(B, S)](logits, logits.stride(0), V, y, inputs.ids, inputs.vals, inputs.tags, inputs.meta_i,
                                    inputs.meta_f, lpw, lpc, S, CH, mask, mask.shape[1], BLOCK=cfg["block"],
                                    NU=inputs.NU, WANT_LP=want_lp, HAS_MASK=inputs.mask is not None,
                                    num_warps=cfg["num_warps"], enable_fp_fusion=False)


def allocate_step(B: int, V: int, device, cfg: dict, KL: int, want_probs: bool = True,
                  want_vector: bool = False) -> dict:
    """The workspace and outputs of one step shape (allocate once, reuse for every step of that shape).

    Parameters
    ----------
    B, V : int
    device : torch.device
    cfg : dict
        Tuning constants (:data:`impls.fused.ops.DEFAULTS` / :data:`~impls.fused.ops.INTERPRETER`).
    KL : int
        Top-logprob entries per row (a power of two).
    want_probs, want_vector : bool
        Allocate the ``(B, V)`` sampled distribution / RAW logprob vector.

    Returns
    -------
    dict
        The filters' buffers (:func:`impls.fused.workspace.allocate`) and ``y`` ``(B, V)`` float32
        rewritten logits, ``lpw`` ``(B * S * 2)`` float32, ``lpc`` ``(B * 4)`` int32, ``topw``
        ``(B * S * KL)`` int64, ``lp`` ``(B,)`` float32, ``rank`` ``(B,)`` int32, ``plp`` ``(B,)``
        float64, ``xk`` ``(B,)`` float32 (the k-th largest survivor for the processed logits), ``top_id``
        ``(B, KL)`` int32, ``top_lp`` ``(B, KL)`` float32, ``vec`` ``(B, V)`` float32 (a 1-element placeholder
        unless ``want_vector``), ``KL``.
    """
    a = allocate(B, V, device, cfg, want_probs)
    S = a["S"]
    a.update(
        y=torch.empty((B, V), dtype=torch.float32, device=device),
        lpw=torch.empty((B * S * 2,), dtype=torch.float32, device=device),
        lpc=torch.zeros((B * 4,), dtype=torch.int32, device=device),
        topw=torch.empty((B * S * KL,), dtype=torch.int64, device=device),
        lp=torch.empty((B,), dtype=torch.float32, device=device),
        rank=torch.empty((B,), dtype=torch.int32, device=device),
        plp=torch.empty((B,), dtype=torch.float64, device=device),
        xk=torch.empty((B,), dtype=torch.float32, device=device),
        top_id=torch.empty((B, KL), dtype=torch.int32, device=device),
        top_lp=torch.empty((B, KL), dtype=torch.float32, device=device),
        vec=torch.empty((B, V) if want_vector else (1,), dtype=torch.float32, device=device),
        KL=KL, want_probs=want_probs, want_vector=want_vector,
    )
    return a


def _step_cfg(dev, want_logprobs: bool) -> dict:
    cfg = INTERPRETER if dev.type == "cpu" else DEFAULTS
    # the PROCESSED logprob divides by the kept set's mass, which an early-accepted row has not summed
    return dict(cfg, early=False) if want_logprobs else cfg


def _fits(a: dict, B: int, V: int, inputs: StepInputs, want_probs: bool, want_logprobs: bool,
          want_vector: bool) -> bool:
    # whether kept step buffers serve a call of this shape and these flags
    return (a["y"].shape == (B, V) and a["KL"] >= pow2(inputs.max_top if want_logprobs else 1, 8)
            and (a["want_vector"] or not want_vector) and (a["want_probs"] or not want_probs))


def prepare_step(logits: torch.Tensor, inputs: StepInputs, want_probs: bool = True, want_logprobs: bool = True,
                 want_vector: bool = False, buffers: Optional[dict] = None) -> dict:
    """A step's first launch alone: bias, penalties and bans into the step's buffers.

    :func:`fused_step` runs it itself; a caller that must see the rewritten logits before it
    chooses the seeds (which rows draw: :func:`impls.fused.slots.row_flags`) runs it here and
    hands the buffers to :func:`fused_step` with ``rewritten=True``, so the launch runs once.

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, V)`` float32, bfloat16 or float16, rows contiguous (CUDA, or CPU under Triton's
        interpreter); not modified.
    inputs : StepInputs
        :func:`pack_rows` of the ``B`` rows, on the logits' device.
    want_probs, want_logprobs, want_vector : bool
        As :func:`fused_step` will be called (they size the buffers; ``want_logprobs`` also has the
        launch take the RAW logprobs' row statistics).
    buffers : dict, optional
        :func:`allocate_step` buffers, reused when they fit; default a fresh allocation.

    Returns
    -------
    dict
        The buffers, ``y`` holding the ``(B, V)`` float32 rewritten logits, marked for one
        :func:`fused_step` call with ``rewritten=True`` (which refuses unmarked buffers, and
        buffers prepared without logprobs for a call that wants them).

    Raises
    ------
    ValueError
        Inputs whose batch differs from the logits'.
    """
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    B, V = logits.shape
    dev = logits.device
    if inputs.ids.shape[0] != B:
        raise ValueError(f"inputs are for {inputs.ids.shape[0]} rows, logits have {B}")
    cfg = _step_cfg(dev, want_logprobs)
    a = buffers
    if a is None or not _fits(a, B, V, inputs, want_probs, want_logprobs, want_vector):
        a = allocate_step(B, V, dev, cfg, pow2(inputs.max_top if want_logprobs else 1, 8), want_probs, want_vector)
    _launch_rewrite(logits, inputs, a["y"], a["lpw"], a["lpc"], a["S"], a["CH"], cfg, want_logprobs)
    a["prepared"] = want_logprobs
    return a


def fused_step(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
               min_p: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor, inputs: StepInputs,
               want_probs: bool = True, want_logprobs: bool = True, want_vector: bool = False,
               buffers: Optional[dict] = None, launcher: str = "cached",
               beam_temperature: Optional[torch.Tensor] = None, rewritten: bool = False,
               filtered: Optional[torch.Tensor] = None) -> dict:
    """One sampling step on the device: bias, penalties, bans, filters, draw and logprobs.

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, V)`` float32, bfloat16 or float16 model logits, rows contiguous (not modified).
    temperature, top_k, top_p, min_p, seed, offset : torch.Tensor
        ``(B,)`` as :func:`impls.fused.ops.fused_sample` takes them (converted there: float32;
        ``top_k``, ``seed``, ``offset`` int64; ``top_p`` float32 or float64).
    inputs : StepInputs
        From :func:`pack_rows`, on the logits' device.
    want_probs : bool
        Also return the sampled distribution ``(B, V)``.
    want_logprobs : bool
        Run the logprobs launch (RAW logprob of the drawn token, rank, PROCESSED logprob, top list).
        Early accept (:data:`impls.fused.ops.DEFAULTS`) is off when it or ``want_probs`` is on: both
        read the kept set's threshold and mass, which the decide launch writes.
    want_vector : bool
        Also return every RAW logprob ``(B, V)`` (``logprobs = -1``).
    buffers : dict, optional
        :func:`allocate_step` of this shape, reused (no allocation in the call); default a fresh one.
    launcher : str
        The filter launches' launcher (:data:`impls.fused.launch.MODES`); the rewrite and logprobs
        launches go through ``kernel[grid]``.
    beam_temperature : torch.Tensor, optional
        ``(B,)`` float32, ``>= 0`` on the rows that take one beam-search step of width 1 (given as
        greedy rows, ``temperature == 0``): their token is the first argmax of
        ``log_softmax(x / T)`` over the rewritten logits (SEMANTICS §3: the beam's log-probabilities
        at its temperature, as the reference computes them in float32: a huge ``T`` ties every
        finite logit at ``-log V``, so the lowest id wins; a ``T`` that rounds to 0 divides by 0),
        taken before the logprobs launch reads the token. Negative elsewhere; None: no beam rows.
    rewritten : bool
        ``buffers`` come from :func:`prepare_step` of these logits and inputs with the same
        ``want_*`` flags: the rewrite launch has run (a caller that needs the rewritten logits
        before it chooses the seeds, as :class:`impls.fused.FusedSession`), so it is not run again.
    filtered : torch.Tensor, optional
        ``(B, V)`` float32, the logits the filter launches, the draw, the probabilities and the PROCESSED
        values of the logprobs launch read instead of the rewritten ones (:func:`impls.fused.chain.apply_chain`:
        the rows of llama.cpp's extra filters hold their outcome, the others the rewritten logits); the RAW
        values stay the rewritten logits' (a row's rank and top list are read from its ``logprobs_mode``'s
        vector, so from these under the processed modes). None: the rewritten logits.

    Returns
    -------
    dict
        ``tokens`` ``(B,)`` int64 (-1 rejected), ``status``, ``path`` ``(B,)`` int32 (codes of
        :mod:`impls.fused.kernel`), ``rewritten`` ``(B, V)`` float32, ``probs`` or None, and with
        logprobs ``logprob`` ``(B,)`` float32, ``rank`` ``(B,)`` int32, ``processed_logprob``
        ``(B,)`` float64, ``top_ids`` ``(B, KL)`` int32 and ``top_logprobs`` ``(B, KL)`` float32
        (the first ``n_top`` of a row are its top logprobs, best first), ``vector`` or None.
        Values of a rejected row are unspecified but for ``tokens`` and ``status``.

    Raises
    ------
    TypeError, ValueError
        :func:`impls.fused.ops.check_call` (the logits and per-row parameters, as
        :func:`impls.fused.ops.fused_sample` checks them); inputs whose batch differs.
    """
    logits, (temperature, top_k, top_p, min_p, seed, offset) = check_call(
        logits, temperature, top_k, top_p, min_p, seed, offset)
    B, V = logits.shape
    cfg = _step_cfg(logits.device, want_logprobs)
    if rewritten:
        a = buffers
        # prepare_step's mark, used once: whether its launch took the RAW logprobs' statistics
        prepared = None if a is None else a.pop("prepared", None)
        if prepared is None or (want_logprobs and not prepared) \
                or not _fits(a, B, V, inputs, want_probs, want_logprobs, want_vector):
            raise ValueError("rewritten=True needs the buffers prepare_step made for these logits, inputs and flags")
    else:
        a = prepare_step(logits, inputs, want_probs, want_logprobs, want_vector, buffers)
    KL = a["KL"]
    S, CH = a["S"], a["CH"]
    if not B:
        return {"tokens": a["tokens"], "status": a["status"], "path": a["path"], "rewritten": a["y"],
                "probs": a["probs"] if want_probs else None}
    kw = dict(num_warps=cfg["num_warps"], enable_fp_fusion=False)
    y = a["y"]
    yf = y if filtered is None else filtered
    if yf.shape != y.shape or yf.dtype != torch.float32 or yf.device != y.device or not yf.is_contiguous():
        raise ValueError(f"filtered: a contiguous ({B}, {V}) float32 tensor on {y.device} is needed")
    run_call((yf, temperature, top_k, top_p, min_p, seed, offset, a["tokens"], a["status"], a["path"], a["probs"],
              a["wsi"], a["wsf"], a["ws64"]), S, CH, want_probs, cfg, launcher)
    if beam_temperature is not None:
        _beam_step(y, beam_temperature, a["tokens"], a["status"])
    out = {"tokens": a["tokens"], "status": a["status"], "path": a["path"], "rewritten": y,
           "probs": a["probs"] if want_probs else None}
    if want_logprobs:
        modes = inputs.modes or filtered is not None   # SPLIT is compiled with MODES only: one variant more
        with quiet_interpreter():
            if modes:
                _kth_kernel[(B,)](yf, V, a["status"], a["wsi"], a["wsf"], a["ws64"], S, inputs.meta_i, top_k, a["xk"],
                                  BLOCK=cfg["block"], NB1=cfg["nb"], NBS=cfg["nbs"], KMAX=cfg["kmax"],
                                  KBIG=cfg["kbig"], **kw)
            _logprobs_kernel[(B, S)](y, yf, V, a["tokens"], a["status"], inputs.n_top, a["lpw"], a["lpc"],
                                     a["topw"], a["wsi"], a["wsf"], a["ws64"], a["lp"], a["rank"], a["plp"],
                                     a["top_id"], a["top_lp"], a["vec"], S, CH, inputs.meta_i, a["xk"],
                                     BLOCK=cfg["block"], NB1=cfg["nb"], NBS=cfg["nbs"], KMAX=cfg["kmax"],
                                     KBIG=cfg["kbig"], KL=KL, WANT_VEC=want_vector, MODES=modes,
                                     SPLIT=filtered is not None, **kw)
        out.update(logprob=a["lp"], rank=a["rank"], processed_logprob=a["plp"], top_ids=a["top_id"],
                   top_logprobs=a["top_lp"], vector=a["vec"] if want_vector else None)
    return out


def _beam_step(y: torch.Tensor, beam_t: torch.Tensor, tokens: torch.Tensor, status: torch.Tensor) -> None:
    # in place on the device: a tensor divisor, so CUDA divides as IEEE does (not by a reciprocal)
    beam_t = beam_t.to(device=y.device, dtype=torch.float32)
    on = (beam_t >= 0) & (status == 0)
    lsm = torch.log_softmax(y / torch.where(beam_t >= 0, beam_t, torch.ones_like(beam_t))[:, None], dim=-1)
    tokens.copy_(torch.where(on, torch.argmax(lsm, dim=-1), tokens))


def launch_count(want_probs: bool, want_logprobs: bool) -> int:
    """Kernel launches of one :func:`fused_step` call without other ``logprobs_mode`` nor ``filtered`` logits
    (``launch_specs`` plus the rewrite and logprobs launches); with them the step adds ``_kth_kernel``, not counted."""
    return 1 + len(launch_specs(1, 16, 16, 1, 16, want_probs, INTERPRETER)) + int(want_logprobs)

