"""Logits rewrites before filtering: logit bias and occurrence penalties.

SEMANTICS §1.2-§1.3 ("penalty sign handling"). Each function takes one row's
logits ``x`` of shape ``(V,)`` in the working dtype (float32, or float64 in
oracle mode) and returns a new tensor; nothing is modified in place.
"""

from __future__ import annotations

from collections import Counter

import torch

from ..base import Row, RowError
from ..profiles import Profile

__all__ = ["apply_logit_bias", "apply_repetition", "apply_presence_frequency", "penalty_active"]


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
    ``profile.prompt_ignore_length_scope == "repetition"`` (Hugging Face). With
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
