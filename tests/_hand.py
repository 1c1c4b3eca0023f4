"""Independent, by-hand computations that the reference tests compare against.

Nothing here calls the reference pipeline: expectations are derived from the
rule text (SEMANTICS.md, DESIGN.md decision 1) with Python's ``math`` in
float64, or with NumPy float32 scalars where the rule is float32 arithmetic.
The only reference code used is :func:`impls.reference.philox.uniforms`, which
``tests/test_philox_triton.py`` pins to Triton's ``tl.philox``.
"""

from __future__ import annotations

import math

import torch

from impls.base import Row
from impls.reference import Reference
from impls.reference.philox import uniforms

NEG_INF = float("-inf")
POS_INF = float("inf")


def step(*rows, session=None, profile=None):
    """Run one step of a fresh reference session (or ``session``) on ``rows``."""
    if session is None:
        session = (Reference() if profile is None else Reference(profile)).open_session()
    return session.step(list(rows))


def row(logits, **kw) -> Row:
    """A :class:`Row` with float32 logits from a plain list."""
    return Row(logits=torch.tensor(logits, dtype=torch.float32), **kw)


def support(result) -> set:
    """The kept set of a result: tokens with non-zero probability in ``result.probs``."""
    return set(torch.nonzero(result.probs > 0).flatten().tolist())


def u_list(seed: int, offset: int, vocab: int) -> list:
    """Canonical uniforms of one row (DESIGN.md decision 1), as Python floats."""
    s = seed - (1 << 64) if seed >= (1 << 63) else seed
    return uniforms(torch.tensor([s], dtype=torch.int64), torch.tensor([offset], dtype=torch.int64), vocab)[0].tolist()


def gumbel_by_hand(logits, keep, temperature, seed, offset):
    """DESIGN.md decision 1, computed in float64 from the formula:

    ``argmax_{j in keep} (x_j - max_{i in keep} x_i) / T - log(-log u_j)``, ties to the lowest id.

    Returns ``(token, margin)`` where ``margin`` is the gap between the best
    and the second-best score (so a test can insist that float32 rounding in
    the reference cannot flip the answer).
    """
    u = u_list(seed, offset, len(logits))
    top = max(logits[j] for j in keep)
    scores = []
    for j in range(len(logits)):
        if j not in keep or u[j] == 0.0:
            scores.append(NEG_INF)
        else:
            scores.append((logits[j] - top) / temperature - math.log(-math.log(u[j])))
    best = max(scores)
    token = scores.index(best)  # first maximum: lowest id
    rest = sorted(scores, reverse=True)
    margin = rest[0] - rest[1] if len(rest) > 1 else POS_INF
    return token, margin


def softmax64(xs, temperature=1.0):
    """Float64 softmax of a list (``-inf`` entries get probability 0)."""
    finite = [x for x in xs if x != NEG_INF]
    m = max(finite)
    e = [0.0 if x == NEG_INF else math.exp((x - m) / temperature) for x in xs]
    s = sum(e)
    return [v / s for v in e]


def log_softmax64(xs, temperature=1.0):
    """Float64 log-softmax of a list."""
    finite = [x for x in xs if x != NEG_INF]
    m = max(finite)
    lse = m / temperature + math.log(sum(math.exp((x - m) / temperature) for x in finite))
    return [NEG_INF if x == NEG_INF else x / temperature - lse for x in xs]
