"""Row-level comparison of outputs with expectations or predictions.

Outputs (:class:`impls.base.RowResult`) are reduced to plain dicts with the
keys of the case format's ``expect`` table (cases/README.md), so a hand-written
expectation, a reference prediction and an implementation's output are
compared by one function, :func:`mismatches`.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from harness.corpus import outputs
from harness.corpus.truths import ASSERTION_KEYS, LOGPROB_KEYS, output_keys
from impls.base import RowResult

__all__ = ["observe", "mismatches", "close", "EXPECT_KEYS", "jsonable", "golden_round", "DRAW_KEYS", "ASSERTION_KEYS",
           "output_keys", "check_truth", "assertion_failures"]

#: Outputs of a sampling row that follow its drawn token: compared one for one only when the
#: same token was drawn (the judge under another RNG; ``sampcheck diff`` between two records).
DRAW_KEYS = frozenset(o.name for o in outputs.OUTPUTS if o.draw)

#: Every output key (:data:`harness.corpus.outputs.KEYS`).
EXPECT_KEYS = outputs.KEYS
#: Vectors longer than this are summarised in reports instead of listed.
MAX_LISTED_VOCAB = 64


def _vec(t: Optional[torch.Tensor]):
    return None if t is None else t.detach().to(torch.float64).cpu().tolist()   # Python floats


def observe(r: RowResult, keys=EXPECT_KEYS) -> dict:
    """Reduce a :class:`RowResult` to the expectation keys in ``keys``.

    ``support`` is derived from ``probs > 0``; keys whose value the
    implementation did not return map to ``None``.

    Returns
    -------
    dict
    """
    out = {}
    for k in keys:
        how = outputs.output(k).compare
        if k == "support":
            out[k] = None if r.probs is None else torch.nonzero(r.probs > 0).flatten().tolist()   # Python ints
        elif how == "vector":
            out[k] = _vec(getattr(r, k))
        elif how == "pairs":
            v = getattr(r, k)
            out[k] = None if v is None else [[int(i), float(x)] for i, x in v]
        else:
            out[k] = getattr(r, k)
    if r.error is not None:
        out["message"] = r.message
    return out


def close(a: float, b: float, atol: float, rtol: float) -> bool:
    """Whether two floats agree: ``|a - b| <= atol + rtol * |b|``; infinities exactly, NaN only with NaN."""
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def _fmt(v) -> str:
    if isinstance(v, list) and len(v) > 8:
        return f"[{', '.join(_fmt(x) for x in v[:8])}, ... ({len(v)} values)]"
    if isinstance(v, float):
        return f"{v:.9g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return repr(v)


def mismatches(got: dict, want: dict, atol: float = 1e-6, rtol: float = 1e-6,
               token_in_support: Optional[list] = None) -> list:
    """Compare an observed row with what is wanted.

    Parameters
    ----------
    got : dict
        From :func:`observe`.
    want : dict
        Expectation keys to check (a hand-written ``expect`` table, or a
        prediction reduced by :func:`observe`). Only keys present (and not
        ``None``) in ``want`` are checked.
    atol, rtol : float
        Float tolerance: ``|a - b| <= atol + rtol * |b|``; infinities exact.
    token_in_support : list of int, optional
        When given, ``token`` is checked as membership in this support
        instead of equality (an implementation whose RNG is not canonical).

    Returns
    -------
    list of str
        One line per mismatch, e.g. ``"token: got 3, want 1"``.
    """
    out = []
    if want.get("error") is not None or got.get("error") is not None:
        if want.get("error") != got.get("error"):
            out.append(f"error: got {got.get('error')!r} ({got.get('message', '')}), want {want.get('error')!r}")
        return out
    for k, w in want.items():
        if w is None or k in ("message", "error"):
            continue
        g = got.get(k)
        if k == "token" and token_in_support is not None:
            if g is None or g not in token_in_support:
                out.append(f"token: got {g!r}, not in the predicted support {_fmt(token_in_support)}")
            continue
        how = outputs.output(k).compare if k in outputs.KEYS else "exact"
        if g is None:
            out.append(f"{k}: not returned, want {_fmt(w)}")
        elif how == "float":
            if not close(g, w, atol, rtol):
                out.append(f"{k}: got {_fmt(g)}, want {_fmt(w)}")
        elif how == "vector":
            if len(g) != len(w):
                out.append(f"{k}: got {len(g)} values, want {len(w)}")
            else:
                bad = [i for i, (a, b) in enumerate(zip(g, w)) if not close(a, b, atol, rtol)]
                if bad:
                    i = bad[0]
                    out.append(f"{k}: {len(bad)} of {len(w)} differ; first at token {i}: got {_fmt(g[i])}, want {_fmt(w[i])}")
        elif how == "pairs":
            ids_g, ids_w = [int(p[0]) for p in g], [int(p[0]) for p in w]
            if ids_g != ids_w or not all(close(a[1], b[1], atol, rtol) for a, b in zip(g, w)):
                out.append(f"{k}: got {_fmt(g)}, want {_fmt(w)}")
        elif k == "support":
            if sorted(g) != sorted(w):
                extra = sorted(set(g) - set(w))
                missing = sorted(set(w) - set(g))
                out.append(f"support: extra {_fmt(extra)}, missing {_fmt(missing)}")
        elif g != w:
            out.append(f"{k}: got {_fmt(g)}, want {_fmt(w)}")
    if "token" in got and got.get("token") is not None and got.get("support") and "support" in want \
            and got["token"] not in got["support"]:
        out.append(f"token: {got['token']} drawn outside the returned support")
    return out


def assertion_failures(got: dict, expect: dict) -> list:
    """What ``got`` (from :func:`observe`) breaks of ``expect``'s profile-independent assertions
    (``finite_logprobs``: :data:`harness.corpus.truths.ASSERTION_KEYS`).

    A row that returned an error has no logprobs to check (its error is compared elsewhere).
    """
    if not expect.get("finite_logprobs") or got.get("error") is not None:
        return []
    out = []
    for k in ("logprob", "processed_logprob"):
        v = got.get(k)
        if v is not None and not math.isfinite(float(v)):
            out.append(f"finite_logprobs: {k} is {_fmt(float(v))}")
    for i, v in (got.get("top_logprobs") or []):
        v = float(v)
        if math.isnan(v) or v == math.inf:
            out.append(f"finite_logprobs: top_logprobs of token {int(i)} is {_fmt(v)}")
            break
    return out


def check_truth(got: dict, truth: dict, atol: float = 1e-6, rtol: float = 1e-6) -> list:
    """Mismatches of an observed row against a hand-written truth, assertion keys included.

    With ``any_of``, the row matches when one alternative (merged over the truth's other
    keys) matches; otherwise the line lists what each alternative found.

    Returns
    -------
    list of str
        As :func:`mismatches`; e.g. ``"any_of: none matches: [token: got 2, want 1] [error: got None (), want
        'posinf_logits']"``.
    """
    plain = {k: v for k, v in truth.items() if k not in ASSERTION_KEYS}
    out = assertion_failures(got, truth)
    alts = truth.get("any_of")
    if not alts:
        return mismatches(got, plain, atol, rtol) + out
    found = [mismatches(got, {**plain, **alt}, atol, rtol) for alt in alts]
    if all(found):
        out.insert(0, "any_of: none matches: " + " ".join(f"[{'; '.join(f)}]" for f in found))
    return out


def jsonable(v, vocab_limit: int = MAX_LISTED_VOCAB):
    """Make ``v`` JSON-safe: non-finite floats become strings ``"inf"``,
    ``"-inf"``, ``"nan"``; long vectors are summarised."""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, dict):
        return {str(k): jsonable(x, vocab_limit) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        if len(v) > vocab_limit and all(isinstance(x, (int, float)) for x in v[:4]):
            return {"length": len(v), "head": [jsonable(x) for x in v[:8]]}
        return [jsonable(x, vocab_limit) for x in v]
    if isinstance(v, torch.Tensor):
        return jsonable(v.tolist(), vocab_limit)
    return v


def golden_round(v):
    """A value as golden files store it: floats rounded to 1e-6 (non-finite ones as ``"inf"``, ``"-inf"``,
    ``"nan"``), lists element by element, anything else unchanged."""
    if isinstance(v, list):
        return [golden_round(x) for x in v]
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        return round(v, 6)
    return v
