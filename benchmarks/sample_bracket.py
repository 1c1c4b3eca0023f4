"""How often a sample of a row bounds its top-p boundary from below: a design study for skipping the histogram pass.

The idea (``benchmarks/README.md``, "Where 4x the floor would come from"): after the statistics pass, a sample of the
row (every ``--stride``-th block of 1,024 logits: contiguous loads) and the row's total mass ``E`` (an online sum in
the statistics pass, float precision) give a logit bound ``t``: the sampled value whose estimated mass *below* it
(the sample's, scaled by the sampled fraction) reaches ``(1 - top_p - margin) * E``. The gather pass would then list
every survivor with ``e >= e(t)``; the row *misses* when that list does not reach past the top-p boundary (fewer
entries than the kept set and one more), and would then take the histogram pass. Estimating the tail below the
boundary (many small masses) rather than the mass above it (a few large ones, which a sample misses) is what keeps
misses rare.

Usage: ``python -m benchmarks.sample_bracket [--rows 300] [--vocab 128256] [--top-p 0.9] [--stride 16]
[--scales 1 3 5 8] [--margins 0.01 0.02 0.03] [--seed 0]``. Rows are ``randn * scale`` in float32 at ``T = 1``
(the latency suite's rows are ``randn * 3``); masses in float64, the rule of SEMANTICS §1.5 (the least prefix of
the descending masses that reaches ``top_p``). Prints, per scale and margin, the misses, the mean kept set and the
mean and 99th percentile of the list. CPU only (NumPy).
"""

from __future__ import annotations

import argparse

import numpy as np

__all__ = ["bound", "study", "main"]


def bound(e: np.ndarray, total: float, top_p: float, margin: float, stride: int, block: int = 1024) -> float:
    """The mass bound ``e(t)`` a sample of one row gives.

    Parameters
    ----------
    e : np.ndarray
        ``(V,)`` float64 masses ``exp((x - max) / T)`` of the row's survivors (0 elsewhere).
    total : float
        The row's total mass ``sum(e)`` (the statistics pass's online sum).
    top_p, margin : float
        The row's top-p and the share of ``total`` the bound keeps below the boundary's tail estimate.
    stride, block : int
        Every ``stride``-th block of ``block`` logits is sampled.

    Returns
    -------
    float
        The least sampled mass whose estimated mass below-or-at it reaches ``(1 - top_p - margin) * total``
        (0.0: every survivor is listed).
    """
    V = e.shape[0]
    starts = np.arange(0, V, block)[::stride]
    idx = np.concatenate([np.arange(s, min(s + block, V)) for s in starts])
    es = np.sort(e[idx])
    below = np.cumsum(es) * (V / len(idx))
    j = int(np.searchsorted(below, (1.0 - top_p - margin) * total))
    return float(es[j - 1]) if j > 0 else 0.0


def study(rows: int, vocab: int, top_p: float, stride: int, scale: float, margin: float, seed: int) -> dict:
    """Misses and list lengths over ``rows`` rows of ``randn * scale`` (module docstring).

    Returns
    -------
    dict
        ``misses`` (rows whose list does not pass the boundary), ``kept`` (mean kept set), ``list`` and
        ``list_p99`` (entries the gather pass would list).
    """
    rng = np.random.default_rng(seed)
    misses, lens, kept = 0, [], []
    for _ in range(rows):
        x = (rng.standard_normal(vocab) * scale).astype(np.float32)
        e = np.exp((x - x.max()).astype(np.float64))
        total = float(e.sum())
        t = bound(e, total, top_p, margin, stride)
        desc = np.sort(e)[::-1]
        n_keep = int(np.searchsorted(np.cumsum(desc) / total, top_p)) + 1
        n_list = int((e >= t).sum())
        misses += n_list < n_keep + 1
        lens.append(n_list)
        kept.append(n_keep)
    return {"misses": misses, "kept": float(np.mean(kept)), "list": float(np.mean(lens)),
            "list_p99": float(np.percentile(lens, 99))}


def main(argv=None) -> int:
    """Print the study's table (module docstring); 0."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sample_bracket", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--stride", type=int, default=16)
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 3.0, 5.0, 8.0])
    ap.add_argument("--margins", type=float, nargs="+", default=[0.01, 0.02, 0.03])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    print(f"{a.rows} rows of randn * scale, V = {a.vocab}, top-p {a.top_p}, every {a.stride}th block of 1024 sampled")
    print("scale  margin  misses  kept      list  list_p99")
    for scale in a.scales:
        for margin in a.margins:
            r = study(a.rows, a.vocab, a.top_p, a.stride, scale, margin, a.seed)
            print(f"{scale:5g}  {margin:6g}  {r['misses']:6d}  {r['kept']:8.0f}  {r['list']:8.0f}  "
                  f"{r['list_p99']:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
