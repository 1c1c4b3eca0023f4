"""Logits rewrites before filtering: logit bias, occurrence penalties, custom logits processors.

SEMANTICS §1.2-§1.3 ("penalty sign handling"), §1.4b. Each function takes one row's
logits ``x`` of shape ``(V,)`` in the working dtype (float32, or float64 in
oracle mode) and returns a new tensor; nothing is modified in place.
"""

from __future__ import annotations


import numpy as np

from collections import Counter

import torch

from .. import processors
from ..base import Row, RowError
from ..profiles import Profile

__all__ = ["apply_logit_bias", "apply_repetition", "apply_presence_frequency", "apply_dry", "penalty_active",
           "apply_custom"]


def apply_custom(x: torch.Tensor, row: Row, profile: Profile) -> torch.Tensor:
    """The row's custom logits processors at ``"custom"`` in ``profile.rewrite_order`` (§1.4b).

    Every kind of ``row.logits_processors``, in order, at the request's steps
    (:func:`impls.processors.steps`: from the row's own history); where ``profile.filter_order``
    holds ``"custom"`` (vLLM) only the kinds that can change the argmax, the argmax-invariant ones
    running among the filters instead (:func:`impls.reference.filters.chain`).

    Returns
    -------
    torch.Tensor
        ``x`` itself when the row has no processor.
    """
    only = False if "custom" in profile.filter_order else None
    return processors.apply_all(x, row.logits_processors, processors.steps(row), only)


def apply_logit_bias(x: torch.Tensor, row: Row, profile: Profile = None) -> torch.Tensor:
    """Add the row's sparse logit bias (TensorRT-LLM's embedding bias).

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` logits, float32 or float64.
    row : Row
        ``row.logit_bias`` is a list of ``(token_id, value)``; a value may be
        ``-inf`` (a ban) or ``+inf``. Repeated ids add up, or the last one
        wins under ``profile.logit_bias_duplicates == "last"``.
    profile : Profile, optional
        Also reads ``validation_skips`` (``"logit_bias_nan"``: a NaN value
        is added rather than rejected). Default: trtllm.

    Returns
    -------
    torch.Tensor
        ``(V,)``, same dtype.

    Raises
    ------
    RowError
        ``invalid_logit_bias`` for an id outside ``[0, V)`` or a NaN value.

    Source: seed 000 § 三处 logits 改写 (step 1, embedding bias first).
    """
    if not row.logit_bias:
        return x
    V = x.shape[-1]
    nan_ok = profile is not None and "logit_bias_nan" in profile.validation_skips
    last = profile is not None and profile.logit_bias_duplicates == "last"
    entries = list({int(t): v for t, v in row.logit_bias}.items()) if last else row.logit_bias
    out = x.clone()
    for tok, val in entries:
        if not 0 <= int(tok) < V or (val != val and not nan_ok):
            raise RowError("invalid_logit_bias", f"logit_bias entry ({tok}, {val}): id must be in [0, {V}) and value not NaN")
        out[int(tok)] = out[int(tok)] + float(val)
    return out


def penalty_active(row: Row) -> bool:
    """True iff any occurrence penalty changes logits (§1.3: ``r != 1 or a != 0 or f != 0``)."""
    r, a, f = row.repetition_penalty, row.presence_penalty, row.frequency_penalty
    return (r is not None and r != 1.0) or bool(a) or bool(f)


def _in_vocab(tokens, V: int) -> list:
    # §1.3: ids outside [0, V) in a history are ignored.
    return [t for t in tokens if 0 <= t < V]


def _window_start(row: Row) -> int:
    """First position of ``prompt + generated`` the penalties see: the last ``penalty_last_n`` ones (§1.3).

    ``penalty_last_n`` unset: 0 (the whole history). ``0`` (penalties off) is handled by the callers.
    Source: ggml-org/llama.cpp:src/llama-sampling.cpp@0344068c ``llama_sampler_penalties_accept`` (a ring
    buffer of the last ``penalty_last_n`` accepted tokens).
    """
    n = row.penalty_last_n
    total = len(row.prompt) + len(row.generated)
    return 0 if n is None else max(total - n, 0)


def _finish(x_in: torch.Tensor, y: torch.Tensor, profile: Profile) -> torch.Tensor:
    if not profile.penalty_clamp_finite:
        return y
    big = torch.finfo(y.dtype).max
    y = y.clamp(-big, big)
    # A non-finite input (a ban written by the bias, or +inf) passes through unchanged.
    return torch.where(torch.isfinite(x_in), y, x_in)


def apply_repetition(x: torch.Tensor, row: Row, profile: Profile) -> torch.Tensor:
    """Repetition penalty over every token seen in prompt + generated (its last ``penalty_last_n``: §1.3).

    ``x < 0 ? x * r : x / r`` for each distinct seen token, so ``r > 1``
    always lowers a logit (dividing a negative logit would raise it). The
    ignored prompt prefix still counts as seen, unless
    ``profile.prompt_ignore_length_scope == "repetition"`` (Hugging Face); the
    prompt counts only under ``profile.repetition_counts_prompt``. With
    ``profile.penalty_clamp_finite`` the result is clamped to
    ``±finfo(dtype).max`` and non-finite inputs pass through.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` float32/float64 logits.
    row, profile
        ``row.repetition_penalty`` (None or 1.0: no-op), histories.

    Returns
    -------
    torch.Tensor
        ``(V,)``, same dtype.

    Source: SEMANTICS §1.3; seed 000 § 罚项 (repetition is multiplicative,
    branching on the sign of the logit).
    """
    r = row.repetition_penalty
    if r is None or r == 1.0 or row.penalty_last_n == 0:
        return x
    V = x.shape[-1]
    start = _window_start(row)
    skip = 0
    if profile.prompt_ignore_length_scope == "repetition":
        # Hugging Face: the ignored prefix is left out of the seen set.
        skip = min(max(row.prompt_ignore_length or 0, 0), len(row.prompt))
    if not profile.repetition_counts_prompt:
        skip = len(row.prompt)  # SGLang: the output tokens only
    history = list(row.prompt) + list(row.generated)
    seen = sorted(set(_in_vocab(history[max(start, skip):], V)))
    if not seen:
        return x
    idx = torch.tensor(seen, dtype=torch.long, device=x.device)
    vals = x[idx]
    new = torch.where(vals < 0, vals * r, vals / r)
    y = x.clone()
    y[idx] = new
    return _finish(x, y, profile)


def apply_presence_frequency(x: torch.Tensor, row: Row, profile: Profile) -> torch.Tensor:
    """Presence and frequency penalties: ``x -= a + f * count`` where ``count > 0``.

    ``count`` is the number of occurrences in
    ``prompt[prompt_ignore_length:] + generated`` when
    ``profile.presence_counts_prompt`` (trtllm: prompt tokens count, unlike
    vLLM and OpenAI), else in ``generated`` only. ``prompt_ignore_length <=
    0`` or None has no effect. With ``penalty_last_n`` only the last that
    many positions of ``prompt + generated`` count (0: no penalty).

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` float32/float64 logits.

    Returns
    -------
    torch.Tensor
        ``(V,)``, same dtype, clamped like :func:`apply_repetition`.

    Source: SEMANTICS §1.3.
    """
    a = row.presence_penalty or 0.0
    f = row.frequency_penalty or 0.0
    if (a == 0.0 and f == 0.0) or row.penalty_last_n == 0:
        return x
    V = x.shape[-1]
    if profile.presence_counts_prompt:
        skip = max(row.prompt_ignore_length or 0, 0) if profile.prompt_ignore_length_scope == "presence_frequency" else 0
        skip = min(skip, len(row.prompt))  # the ignored prefix never reaches into the generated tokens
    else:
        skip = len(row.prompt)
    history = list(row.prompt) + list(row.generated)
    counted = history[max(_window_start(row), skip):]
    counts = Counter(_in_vocab(counted, V))
    if not counts:
        return x
    toks = sorted(counts)
    idx = torch.tensor(toks, dtype=torch.long, device=x.device)
    c = torch.tensor([counts[t] for t in toks], dtype=x.dtype, device=x.device)
    y = x.clone()
    y[idx] = x[idx] - (a + f * c)
    return _finish(x, y, profile)


def _dry_restart_limit(window: list, breakers) -> int:
    """How far back a repetition may reach: the tokens after the latest sequence breaker, or the whole window.

    Scanning from the most recent token back, the first position where a breaker (a token-id
    sequence: its first token there, the rest following toward the end) starts limits the length
    to the tokens after the breaker's last token; the longest breaker matching there counts
    (llama.cpp ``llama_sampler_dry_apply``, step 1).
    """
    L = len(window)
    for i in range(L):                       # i tokens from the end: window[L - 1 - i] is the head
        head = window[L - 1 - i]
        best = -1
        for b in breakers:
            tail = list(b[1:])
            if b and b[0] == head and len(tail) > best and len(tail) <= i:
                if all(tail[o] == window[L - 1 - i + 1 + o] for o in range(len(tail))):
                    best = len(tail)
        if best >= 0:
            return i - best
    return L


def apply_dry(x: torch.Tensor, row: Row, profile: Profile) -> torch.Tensor:
    """DRY ("don't repeat yourself"): penalise the token that would extend a repetition of the history's end.

    Over the last ``dry_penalty_last_n`` tokens of ``prompt + generated`` (unset: all; the
    window must be longer than ``dry_allowed_length``): for every earlier position whose
    preceding tokens repeat the window's final ``n`` tokens (``n`` capped by the restart limit of
    ``dry_sequence_breakers``), the token that followed there is penalised by
    ``dry_multiplier * dry_base ** (n - dry_allowed_length)`` when ``n >= dry_allowed_length``,
    with each token's longest ``n``; the exponent is capped at ``floor(88.7228391 / ln base)``
    (``base > 1.000001``). A single-token breaker is never penalised. Off unless
    ``dry_multiplier != 0``, ``dry_base >= 1`` and the window is not 0.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` float32/float64 logits.

    Returns
    -------
    torch.Tensor
        ``(V,)``, same dtype (no clamp: llama.cpp subtracts in float).

    Source: llama.cpp ``llama_sampler_dry_apply`` (llama-cpp-python 0.3.36's bundle; a reverse
    Z-algorithm computes the same match lengths as the direct comparison here).
    """
    m = row.dry_multiplier
    base = row.dry_base if row.dry_base is not None else 1.75
    allowed = row.dry_allowed_length if row.dry_allowed_length is not None else 2
    last_n = row.dry_penalty_last_n
    if m is None or m == 0 or not base >= 1 or last_n == 0 or (last_n is not None and last_n < 0):
        return x
    history = list(row.prompt) + list(row.generated)
    window = history[-last_n:] if last_n is not None else history
    L = len(window)
    if L <= allowed:
        return x
    breakers = [list(b) for b in (row.dry_sequence_breakers or [])]
    limit = _dry_restart_limit(window, breakers)
    if limit < allowed:
        return x
    longest: dict = {}
    for k in range(1, L):                    # the occurrence ending k tokens before the end
        n = 0
        while n + k < L and window[L - 1 - n] == window[L - 1 - n - k]:
            n += 1
        n = min(n, limit)
        if n >= allowed:
            tok = window[L - k]              # what followed that occurrence
            longest[tok] = max(longest.get(tok, -1), n)
    single = {b[0] for b in breakers if len(b) == 1}
    # computed in float32, as llama.cpp does (88.7228391f / std::log(float)): at base 2**64 float32
    # gives exactly 2 where float64 gives 1.9999999997
    cap = int(np.float32(88.7228391) / np.log(np.float32(base))) if base > 1.000001 else 0
    V = x.shape[-1]
    y = x.clone()
    for tok, n in longest.items():
        if not 0 <= tok < V or tok in single:
            continue
        e = n - allowed
        if cap > 0 and e > cap:
            e = cap
        y[tok] = x[tok] - m * base ** e
    return y
