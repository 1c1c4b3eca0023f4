"""Token-for-token sweep of the fused kernel against the reference on a GPU.

For each configuration (vocabulary drawn log-uniformly in ``[2, 262144]``, a
parameter mix, an input dtype), one row of logits is drawn and sampled
``draws`` times with random seeds and offsets by the fused kernel; the
reference's kept set is computed once per row (:func:`impls.reference.filters.kept_set`)
and its canonical Gumbel-max draw is evaluated on the kept tokens only. At
every mismatch the relative gap between the two best perturbed scores of
the reference is recorded (DESIGN.md decision 1: a mismatch is legitimate
only at a near-tie).

With ``--step`` the whole fused step is swept (:func:`impls.fused.step.fused_step`): each
configuration's row also gets a random request (logit bias with ``-inf`` and repeated ids,
repetition/presence/frequency penalties over a random history with out-of-vocabulary ids and a
``prompt_ignore_length``, one- and multi-token bad words, ``min_length`` with an end id,
no-repeat-ngram, a grammar bitmask, ``allowed_token_ids``, llama.cpp's extra filters ``min_keep``,
top-n-sigma, typical-p and XTC through :mod:`impls.fused.chain`) and top logprobs. Checked per configuration: the rewritten logits equal the
reference's :func:`impls.reference.sampler.rewrite_logits` (run on the CPU) bit for bit; every draw's token equals
the reference's canonical draw on the reference's kept set of its rewritten logits; the drawn
token's RAW logprob equals ``log_softmax`` of the reference's rewritten logits within
``1e-5 + 1e-5 |lp|``; its rank lies between the reference's float32 rank with tokens within
``4e-6 |lp|`` of it counted above and the exact rank ``1 + #{y_j > y_t}`` (the float32
log-softmax of two engines may round two distinct logits onto one logprob differently: an
exactly equal rank is counted too, ``rank_exact``); the top-k ids of the first row equal the
reference's :func:`impls.reference.logprobs.top_logprobs` ids.

Usage: ``python -m benchmarks.gpu_sweep --draws 1000000 --out FILE.json`` (add ``--step``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import time

import torch

from impls.fused.ops import fused_sample
from impls.profiles import TRTLLM
from impls.reference.filters import chain, kept_set, mixture_probs
from impls.reference.modes import SAMPLING, Resolved
from impls.reference.philox import philox4x32, _words_to_uniform

MIXES = ("k50_p09", "p09", "minp005", "k", "all", "untruncated", "p09999999", "p_edge")


def edge_top_p(row: torch.Tensor, T: float, rng: random.Random) -> float:
    """``top_p`` 3e-7 above or below the float64 mass strictly above a random token of the row's
    most likely 99.9% (mix ``p_edge``). Exact arithmetic decides membership (SEMANTICS §1.5);
    3e-7 is 5 float32 ulps below 1, above what the kernel's own float32 ``exp`` can move a mass
    (<= 2 ulps per token, <= 6e-8 for the mass above a token), so a kernel that sums exactly
    must agree; tests/test_fused.py resolves 1e-8 where ``exp`` is correctly rounded."""
    p = torch.softmax(row.double().cpu() / T, -1)
    s = torch.sort(p, descending=True).values
    excl = torch.cumsum(s, 0) - s
    n = max(1, int((excl < 0.999).sum()))
    j = rng.randrange(1, n) if n > 1 else 0
    # a token tied with the one before has the same mass above; keep to distinct values
    return min(float(excl[j]) + rng.choice([3e-7, -3e-7]), 1.0 - 1e-12) if j else 0.5


def mix_params(mix: str, rng: random.Random, V: int):
    """``(temperature, top_k, top_p, min_p)`` for a mix."""
    t = rng.choice([0.5, 0.8, 1.0, 1.3])
    return {
        "k50_p09": (t, 50, 0.9, 0.0), "p09": (t, 0, 0.9, 0.0), "minp005": (t, 0, 1.0, 0.05),
        "k": (t, rng.choice([2, 8, 100, 1000]), 1.0, 0.0),
        "all": (t, rng.choice([20, 200]), rng.choice([0.5, 0.95]), rng.choice([0.01, 0.1])),
        "untruncated": (t, 0, 1.0, 0.0), "p09999999": (t, 0, 0.9999999, 0.0), "p_edge": (t, 0, None, 0.0),
    }[mix]


def uniforms_at(seeds: torch.Tensor, offsets: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Canonical uniforms ``(draws, len(idx))`` for token ids ``idx`` only."""
    s = seeds.reshape(-1, 1)
    o = offsets.reshape(-1, 1)
    j = idx.reshape(1, -1).to(torch.int64)
    k0, k1 = s & 0xFFFFFFFF, (s >> 32) & 0xFFFFFFFF
    zero = torch.zeros_like(j)
    w = philox4x32(j // 4, zero, (o & 0xFFFFFFFF).expand(-1, j.shape[1]), ((o >> 32) & 0xFFFFFFFF).expand(-1, j.shape[1]),
                   k0, k1)
    words = torch.stack(w, dim=-1)
    pick = (j % 4).expand(words.shape[0], -1).unsqueeze(-1)
    return _words_to_uniform(torch.gather(words, 2, pick).squeeze(-1))


def step_request(rng: random.Random, V: int) -> dict:
    """Random rewrite fields of one row for ``--step``: bias, penalties over a history (or its last
    ``penalty_last_n``), DRY over a history that ends with a repetition, bans, min_length, a grammar bitmask and
    ``allowed_token_ids``.

    Returns
    -------
    dict
        :class:`impls.base.Row` keyword arguments (histories hold a few ids outside ``[0, V)``).
    """
    n = rng.randrange(0, 300)
    hist = [rng.randrange(-2, V + 2) if rng.random() < 0.03 else rng.randrange(0, V) for _ in range(n)]
    dry = rng.random() < 0.3
    if dry and n:   # the history ends with a repetition of an earlier stretch, for DRY to penalise
        c = rng.randrange(0, n)
        hist += hist[c:c + rng.randrange(1, 12)]
        n = len(hist)
    cut = rng.randrange(0, n + 1)
    kw = {"prompt": hist[:cut], "generated": hist[cut:]}
    if rng.random() < 0.7:
        kw["repetition_penalty"] = rng.choice([0.8, 1.1, 1.3, 2.0])
    if rng.random() < 0.7:
        kw.update(presence_penalty=rng.choice([-0.5, 0.2, 1.0]), frequency_penalty=rng.choice([0.0, 0.1, 0.5]),
                  prompt_ignore_length=rng.choice([None, 0, 3, cut, 10 ** 6, -1]))
    bias = [(rng.randrange(V), rng.choice([float("-inf"), rng.uniform(-5, 5), 1e8, -1e8]))
            for _ in range(rng.randrange(0, 12))]
    if bias and rng.random() < 0.5:
        bias.append((bias[0][0], rng.uniform(-3, 3)))   # a repeated id: the values add up in order
    kw["logit_bias"] = bias
    words = [[rng.randrange(V)] for _ in range(rng.randrange(0, 4))]
    if len(hist) >= 2 and all(0 <= t < V for t in hist[-2:]):
        words.append([hist[-1], rng.randrange(V)])          # a two-token word whose prefix ends the history
        words.append(hist[-2:] + [rng.randrange(V)])
    kw["bad_words"] = words
    if rng.random() < 0.5:
        kw.update(end_id=rng.randrange(V), min_length=rng.randrange(0, 2 * len(kw["generated"]) + 2))
    kw["no_repeat_ngram_size"] = rng.choice([None, 0, 2, 3])
    kw["penalty_last_n"] = rng.choice([None, None, 0, 1, 16, n])
    if dry:
        kw.update(dry_multiplier=rng.choice([0.5, 1.0]), dry_base=rng.choice([1.1, 1.75, 3.0]),
                  dry_allowed_length=rng.choice([1, 2, 3]), dry_penalty_last_n=rng.choice([None, 64]),
                  dry_sequence_breakers=[[rng.randrange(V)], [rng.randrange(V), rng.randrange(V)]])
    if rng.random() < 0.2:   # a grammar bitmask allowing about 3/4 of the ids (each bit set with p = 3/4)
        kw["token_bitmask"] = [rng.getrandbits(32) | rng.getrandbits(32) for _ in range((V + 31) // 32)]
    if rng.random() < 0.2:
        kw["allowed_token_ids"] = rng.sample(range(V), rng.randrange(1, min(V, 4096) + 1))
    if rng.random() < 0.3:   # llama.cpp's extra filters (impls.fused.chain), one or several
        kw.update(min_keep=rng.choice([None, 0, 1, 3, 50]), top_n_sigma=rng.choice([None, 0.5, 1.0, 2.5]),
                  typical_p=rng.choice([None, 0.2, 0.6, 0.95]), xtc_probability=rng.choice([None, 0.3, 1.0]),
                  xtc_threshold=rng.choice([None, 0.01, 0.05, 0.2]))
    return kw


#: The fields of llama.cpp's extra filters a ``--step`` request may set (:func:`step_request`).
CHAIN_FIELDS = ("min_keep", "top_n_sigma", "typical_p", "xtc_probability", "xtc_threshold")


def step_check(row: torch.Tensor, kw: dict, mix_p: tuple, seeds, offs, n_top: int, dev) -> dict:
    """One ``--step`` configuration: the fused step on ``N`` copies of a row against the reference.

    Returns
    -------
    dict or None
        Counts ``draws``, ``tokens`` (mismatched tokens), ``rewrite`` (0/1), ``logprob``, ``rank``
        (outside the bounds), ``rank_exact`` (equal to the reference's float32 rank), ``top`` (0/1),
        the reference's ``want`` tokens and the fused ``path``; None when the reference rejects the
        row (no finite logit left, NaN from ``-inf + inf``), which the sweep then skips.
    """
    from impls.base import Row
    from impls.fused.step import StepInputs, fused_step, pack_rows
    from impls.reference.logprobs import ranks, top_logprobs
    from impls.reference.sampler import model_logits, rewrite_logits

    T, K, P, M = mix_p
    N, V = len(seeds), row.shape[0]
    r = Row(logits=row, **kw)
    # the reference's rewrites on the CPU: PyTorch's CUDA division by a Python scalar multiplies by its
    # reciprocal (1 ulp from IEEE division at times); the kernel divides as the CPU does
    rc = r.replace(logits=row.cpu())
    x_ref = rewrite_logits(model_logits(rc, TRTLLM).float(), rc, TRTLLM, allow_nan=True).to(dev)
    if bool(torch.isnan(x_ref).any()) or not bool((x_ref > float("-inf")).any()):
        return None
    one, errs = pack_rows([r], V, dev)
    assert errs == [None], errs
    rep = lambda t: t.expand(N, *t.shape[1:]).contiguous()
    inputs = StepInputs(rep(one.ids), rep(one.vals), rep(one.tags), rep(one.meta_i), rep(one.meta_f),
                        torch.full((N,), n_top, dtype=torch.int32, device=dev), n_top,
                        None if one.mask is None else rep(one.mask))
    full = lambda v, dt: torch.full((N,), v, dtype=dt, device=dev)
    chain_kw = {f: kw[f] for f in CHAIN_FIELDS if kw.get(f) is not None}
    res = Resolved(SAMPLING, temperature=T, top_k=K, top_p=P, min_p=M, **chain_kw)
    filtered, t_draw = None, T
    from impls.fused.admit import SAMPLING as SAMPLES, admit
    adm = admit(r.replace(temperature=T, top_k=K, top_p=P, min_p=M))
    if adm.mode != SAMPLES:   # a greedy spelling of the mix (top_k 1, top_p 0): the extra filters do not apply
        chain_kw, res = {}, Resolved(SAMPLING, temperature=T, top_k=K, top_p=P, min_p=M)
    if chain_kw:   # the session's path (impls.fused.draw_filters): the chain's outcome, the kernel's filters off
        from impls.fused import draw_filters
        from impls.fused.step import fused_rewrite
        y1 = fused_rewrite(row[None], one)
        p1 = {"top_k": torch.tensor([K], device=dev), "top_p": torch.tensor([P], dtype=torch.float64, device=dev),
              "min_p": torch.tensor([M], dtype=torch.float32, device=dev)}
        t1, f1, _ = draw_filters(y1, [adm], [r], p1, dev)
        if f1 is not None:
            filtered, t_draw = f1.expand(N, V).contiguous(), float(t1[0])
            K, P, M = int(p1["top_k"][0]), float(p1["top_p"][0]), float(p1["min_p"][0])
    o = fused_step(row.expand(N, V), full(t_draw, torch.float32), full(K, torch.int64), full(P, torch.float64),
                   full(M, torch.float32), seeds, offs, inputs=inputs, want_probs=False, want_logprobs=True,
                   filtered=filtered)
    assert int((o["status"] != 0).sum()) == 0, "unexpected rejected rows"
    tok = o["tokens"]
    outs = chain(x_ref, res, TRTLLM)
    keep = outs[0].keep if len(outs) == 1 else outs[0].keep | outs[1].keep
    # the reference's draw: Gumbel-max over the kept logits at T, or over the mixture's log-probabilities at 1
    xd, td = x_ref, T
    if len(outs) == 2:
        xd, td = torch.log(mixture_probs(x_ref, outs)), 1.0
    idx = keep.nonzero().flatten()
    top = xd[idx].max()
    want = torch.empty(N, dtype=torch.int64, device=dev)
    chunk = max(1, int(2 ** 26 // max(len(idx), 1)))
    for a in range(0, N, chunk):
        u = uniforms_at(seeds[a:a + chunk], offs[a:a + chunk], idx)
        want[a:a + chunk] = idx[((xd[idx] - top) / td - torch.log(-torch.log(u))).argmax(1)]
    lp_ref = torch.log_softmax(x_ref, -1)
    lpt = lp_ref[tok]
    lp_bad = (o["logprob"].double() - lpt.double()).abs() > 1e-5 + 1e-5 * lpt.double().abs()
    rk = o["rank"].to(torch.int64)
    r_ref = ranks(lp_ref, tok, "strict_plus_one").to(rk.device)
    srt = torch.sort(x_ref).values
    r_hi = 1 + V - torch.searchsorted(srt, x_ref[tok], right=True)             # 1 + #{y_j > y_t}
    lps = torch.sort(lp_ref).values
    r_lo = 1 + V - torch.searchsorted(lps, lpt + 4e-6 * lpt.abs().clamp_min(1.0), right=True)
    rank_bad = (rk < torch.minimum(r_lo, r_ref)) | (rk > r_hi)
    top_bad = 0
    if n_top:
        want_top = [i for i, _ in top_logprobs(lp_ref.cpu(), n_top, int(tok[0]))][:n_top]
        top_bad = int(o["top_ids"][0, :min(n_top, V)].tolist() != want_top)   # past V: the kernel's pads
    y = o["rewritten"]
    return {"draws": N, "tokens": int((tok != want).sum()),
            "rewrite": int(not torch.equal(y[0], x_ref) or not torch.equal(y[-1], x_ref)),
            "logprob": int(lp_bad.sum()), "rank": int(rank_bad.sum()), "rank_exact": int((rk == r_ref).sum()),
            "top": top_bad, "want": want, "path": o["path"]}


def main(argv=None) -> int:
    """Run the token-for-token sweep and write its JSON (mismatches and gaps are in it).

    Returns 1 when a draw differs from the reference (the exit status), else 0.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1_000_000)
    ap.add_argument("--per-config", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--out", default="benchmarks/results/gpu_sweep.json")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu under TRITON_INTERPRET=1 (a smoke test)")
    ap.add_argument("--max-vocab", type=int, default=262144)
    ap.add_argument("--step", action="store_true", help="sweep the whole step (rewrites, draw, logprobs)")
    args = ap.parse_args(argv)
    step = {"configs": 0, "skipped": 0, "rewrite": 0, "logprob": 0, "rank": 0, "rank_exact": 0, "top": 0}
    dev = args.device
    rng = random.Random(args.seed)
    total = mism = 0
    gaps, worst = [], []
    per_mix = {}
    t0 = time.time()
    n_cfg = math.ceil(args.draws / args.per_config)
    c = -1
    while total < args.draws if args.step else c + 1 < n_cfg:
        c += 1
        V = max(2, int(round(math.exp(rng.uniform(math.log(2), math.log(args.max_vocab))))))
        mix = MIXES[c % len(MIXES)]
        dtype = [torch.float32, torch.bfloat16, torch.float16][c % 3]
        sigma = rng.choice([0.5, 1.0, 2.0, 4.0])
        g = torch.Generator(device=dev).manual_seed(rng.randrange(2 ** 31))
        row = (torch.randn(V, generator=g, device=dev) * sigma).to(dtype)
        T, K, P, M = mix_params(mix, rng, V)
        if P is None:
            P = edge_top_p(row, T, rng)
        N = args.per_config
        seeds = torch.tensor([rng.randrange(-2 ** 63, 2 ** 63) for _ in range(N)], dtype=torch.int64, device=dev)
        offs = torch.tensor([rng.randrange(0, 2 ** 63) for _ in range(N)], dtype=torch.int64, device=dev)
        full = lambda v, dt: torch.full((N,), v, dtype=dt, device=dev)
        if args.step:
            res = step_check(row, step_request(rng, V), (T, K, P, M), seeds, offs, rng.choice([0, 1, 5, 20]), dev)
            if res is None:
                step["skipped"] += 1
                continue
            step["configs"] += 1
            for k in ("rewrite", "logprob", "rank", "rank_exact", "top"):
                step[k] += res[k]
            nb = res["tokens"] + res["rewrite"] + res["logprob"] + res["rank"] + res["top"]
            total += N
            mism += nb
            pm = per_mix.setdefault(mix, {"draws": 0, "mismatches": 0})
            pm["draws"] += N
            pm["mismatches"] += nb
            if nb:
                worst.append({"config": c, "vocab": V, "mix": mix, "dtype": str(dtype), "mismatches": nb,
                              **{k: res[k] for k in ("tokens", "rewrite", "logprob", "rank", "top")}})
            if c % 50 == 0:
                print(f"config {c}/{n_cfg}: {total} draws, {mism} mismatches, {time.time() - t0:.0f} s", flush=True)
            continue
        tok, status, path, _ = fused_sample(row.expand(N, V), full(T, torch.float32), full(K, torch.int64),
                                            full(P, torch.float64), full(M, torch.float32), seeds, offs)
        assert int((status != 0).sum()) == 0, "unexpected rejected rows"
        x = row.float()
        keep = kept_set(x, Resolved(SAMPLING, temperature=T, top_k=K, top_p=P, min_p=M), TRTLLM)
        idx = keep.nonzero().flatten()
        top = x[idx].max()
        want = torch.empty(N, dtype=torch.int64, device=dev)
        gap = torch.empty(N, dtype=torch.float32, device=dev)
        chunk = max(1, int(2 ** 26 // max(len(idx), 1)))
        for a in range(0, N, chunk):
            u = uniforms_at(seeds[a:a + chunk], offs[a:a + chunk], idx)
            sc = (x[idx] - top) / T - torch.log(-torch.log(u))
            best2 = torch.topk(sc, min(2, sc.shape[1]), dim=1)
            want[a:a + chunk] = idx[sc.argmax(1)]  # first maximum: ties -> lowest id
            if sc.shape[1] > 1:
                gap[a:a + chunk] = (best2.values[:, 0] - best2.values[:, 1]) / best2.values[:, 0].abs().clamp_min(1.0)
            else:
                gap[a:a + chunk] = float("inf")
        bad = tok != want
        nb = int(bad.sum())
        total += N
        mism += nb
        pm = per_mix.setdefault(mix, {"draws": 0, "mismatches": 0})
        pm["draws"] += N
        pm["mismatches"] += nb
        if nb:
            gb = gap[bad].tolist()
            gaps.extend(gb)
            worst.append({"config": c, "vocab": V, "mix": mix, "dtype": str(dtype), "mismatches": nb,
                          "max_gap": max(gb), "paths": sorted(set(path[bad].tolist()))})
        if c % 50 == 0:
            print(f"config {c}/{n_cfg}: {total} draws, {mism} mismatches, {time.time() - t0:.0f} s", flush=True)
    doc = {
        "schema": 2, "top_p_dtype": "float64", "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (Triton interpreter)", "versions": {
            "torch": torch.__version__, "triton": __import__("triton").__version__, "python": platform.python_version()},
        "draws": total, "mismatches": mism, "mismatch_rate": mism / max(total, 1),
        "largest_gap_at_mismatch": max(gaps) if gaps else None, "per_mix": per_mix, "mismatch_configs": worst[:50],
        "seconds": time.time() - t0,
        "fused_config": dict(__import__("impls.fused.ops", fromlist=["DEFAULTS"]).DEFAULTS),
    }
    if args.step:
        doc["step"] = step   # mismatches above count tokens, rewrites, logprobs, ranks and top lists
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({k: doc[k] for k in ("draws", "mismatches", "mismatch_rate", "largest_gap_at_mismatch", "step")
                      if k in doc}))
    return 1 if mism else 0


if __name__ == "__main__":
    raise SystemExit(main())
