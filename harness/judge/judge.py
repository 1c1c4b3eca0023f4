"""Judging one case on one implementation: the statuses of DESIGN.md.

:meth:`Judge.evaluate` runs, in order:

1. feature check — a feature the implementation lacks, or a row it cannot
   express, is ``n/a`` (reason kept);
2. predictions — the reference under the *default* profile and under the
   implementation's own profile run the same batches (cached per case);
3. the implementation runs each batch on a fresh session (any exception is
   an ``error`` with its message; nothing else is lost);
4. comparison by check kind:

   * ``exact``: the default prediction must equal the case's hand-written
     expectations (else ``fail``: the reference or the case is wrong); the
     output must equal its own profile's prediction (else ``known-bug`` if a
     registered finding covers it, or ``fail``); when that prediction differs
     from the default one the status is ``known-diff`` and the details name
     the profile fields responsible, with their citations; else ``pass``;
   * ``statistical``: support, then an exact multinomial test (2-3 tokens)
     or a binned G-test with Williams' correction against the float64
     prediction under the implementation's profile, with N from a power
     analysis (:mod:`harness.judge.stats`);
   * ``invariant``: the relations between rows of different batches must hold
     on the implementation's own outputs (they need no agreement on
     semantics).

An implementation whose RNG is not the canonical one (profile field ``rng``)
is compared on the support of stochastic rows, not on their tokens.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from impls.profiles import TRTLLM, Profile
from impls.reference import Reference
from impls.reference.sampler import token_outputs
from impls.base import RowError

from .blame import blame, field_entries
from harness.corpus.load import Case
from .compare import DRAW_KEYS, jsonable, mismatches, observe
from harness.corpus.findings import match_finding
from .stats import DEFAULT_EPSILON, FAMILY_ALPHA, TARGET_POWER, check_draws, plan_draws

__all__ = ["Result", "Judge", "STATUSES"]

STATUSES = ("pass", "known-diff", "known-bug", "fail", "n/a", "skip", "error")



@dataclass
class Result:
    """One (case, implementation) verdict, as written to results.json."""

    case: str
    impl: str
    status: str
    check: str
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The results.json form (non-finite floats as strings)."""
        return {"case": self.case, "impl": self.impl, "status": self.status, "check": self.check,
                "seconds": round(self.seconds, 6), "details": jsonable(self.details)}


def _keys(expect: dict) -> list:
    return sorted(set(expect) | {"token", "error"})


class Judge:
    """Evaluates cases on implementations.

    Parameters
    ----------
    findings : list of Finding
        Registered engine bugs (``known-bug``).
    n_stat_checks : int
        Number of statistical checks (rows of statistical cases) in the
        declared corpus; the per-check level is ``FAMILY_ALPHA / n``.
    device : str
        ``"cpu"`` or ``"cuda"``.
    """

    def __init__(self, findings: list, n_stat_checks: int, device: str = "cpu"):
        self.findings = findings
        self.alpha = FAMILY_ALPHA / max(n_stat_checks, 1)
        self.device = device
        self._pred: dict = {}

    # -- predictions ---------------------------------------------------
    def predict(self, case: Case, profile: Profile, dtype: torch.dtype = torch.float32, cache: bool = True) -> list:
        """Reference outputs for every batch of ``case`` under ``profile``.

        Parameters
        ----------
        case : Case
        profile : Profile
        dtype : torch.dtype
            Working dtype of the reference (float64 for statistical predictions).
        cache : bool
            Keep the result for later calls (the probe profiles of
            :mod:`harness.judge.blame`, up to hundreds per case, are not kept).

        Returns
        -------
        list of list of RowResult
            One list per batch, one result per row.
        """
        key = (case.id, profile, dtype)
        if key in self._pred:
            return self._pred[key]
        ref = Reference(profile, dtype=dtype)
        out = [ref.open_session("cpu").step([r.to_row() for r in b.rows]) for b in case.batches]
        if cache:
            self._pred[key] = out
        return out

    def explain(self, case: Case, profile: Profile, keys_per_row: list) -> list:
        """Profile fields whose value alone changes the default prediction of ``case`` (:func:`harness.judge.blame.blame`).

        Parameters
        ----------
        keys_per_row : list of list of list of str
            Per batch, per row, the output keys compared.

        Returns
        -------
        list of dict
            :func:`harness.judge.blame.field_entries` for each responsible field;
            every differing field (marked ``"combination"``) when no single
            one is responsible.
        """
        default = self.predict(case, TRTLLM)

        def changes(probe_profile) -> bool:
            pred = self.predict(case, probe_profile, cache=False)
            return any(mismatches(observe(p, keys), observe(d, keys))
                       for bp, bd, bk in zip(pred, default, keys_per_row) for p, d, keys in zip(bp, bd, bk))
        found, _ = blame(profile, changes)
        return field_entries(profile, found) if found else field_entries(profile)

    def explain_relations(self, case: Case, profile: Profile, checks: list) -> list:
        """Profile fields that break a relation broken in ``checks``: alone, else in pairs (:func:`harness.judge.blame.blame`).

        Falls back to :meth:`explain` on the rows' tokens and errors when
        neither a field nor a pair breaks one.

        Parameters
        ----------
        case : Case
        profile : Profile
        checks : list of dict
            From :meth:`_relations`: ``kind``, ``a``, ``b``, ``holds``.

        Returns
        -------
        list of dict
            As :meth:`explain`; fields found only in pairs are marked
            ``"combination"``.
        """
        broken = {(c["kind"], c["a"], c["b"]) for c in checks if not c["holds"]}

        def breaks(probe_profile) -> bool:
            return any((c["kind"], c["a"], c["b"]) in broken and not c["holds"]
                       for c in self._relations(case, self.predict(case, probe_profile, cache=False)))
        found, together = blame(profile, breaks, pairs=True)
        if not found:
            return self.explain(case, profile, [[["token", "error"] for _ in b.rows] for b in case.batches])
        return field_entries(profile, found, together)

    # -- entry point -------------------------------------------------------
    def evaluate(self, case: Case, impl, version: str) -> Result:
        """Judge ``case`` on ``impl`` (see the module docstring for the steps).

        Never raises for a problem of the implementation: exceptions become
        ``error`` results.
        """
        t0 = time.perf_counter()
        try:
            res = self._evaluate(case, impl, version)
        except Exception as e:  # an implementation crash must not stop the run
            res = Result(case.id, impl.name, "error", case.check,
                         details={"message": f"{type(e).__name__}: {e}",
                                  "traceback": traceback.format_exc(limit=6)[-3000:]})
        res.seconds = time.perf_counter() - t0
        return res

    def _na(self, case: Case, impl) -> Optional[str]:
        # An implementation may run whole scenarios (finish rules, scheduling from the
        # reference's runner) with more features than its single steps express.
        features = getattr(impl, "scenario_features", impl.features) if case.check == "scenario" else impl.features
        missing = sorted(case.features - features)
        if missing:
            return f"{impl.name} cannot express feature(s): {', '.join(missing)}"
        for b in case.batches:
            for r in b.rows:
                why = impl.unsupported(r.to_row())
                if why:
                    return f"{b.name}:{r.index}: {why}"
        return None

    def _evaluate(self, case: Case, impl, version: str) -> Result:
        why = self._na(case, impl)
        if why:
            return Result(case.id, impl.name, "n/a", case.check, details={"message": why})
        if case.check == "statistical":
            return self._statistical(case, impl, version)
        if case.check == "scenario":
            from . import scenarios
            return scenarios.evaluate(self, case, impl, version)
        default = self.predict(case, TRTLLM)
        # 1. the reference under the default profile against the hand-written expectations
        hand = []
        for b, preds in zip(case.batches, default):
            for r, p in zip(b.rows, preds):
                if r.expect:
                    bad = mismatches(observe(p, _keys(r.expect)), r.expect, case.atol, case.rtol)
                    if bad:
                        hand.append({"row": f"{b.name}:{r.index}", "mismatches": bad})
        # 2. the implementation's own outputs
        actual = [impl.open_session(self.device).step([r.to_row() for r in b.rows]) for b in case.batches]
        if case.check == "invariant":
            return self._invariant(case, impl, version, actual, hand)
        pred = self.predict(case, impl.profile)
        canonical = impl.profile.rng == "canonical"
        rows, own, vs_default = [], [], []
        keys_per_row = []
        for b, ab, pb, db in zip(case.batches, actual, pred, default):
            kb = []
            for r, a, p, d in zip(b.rows, ab, pb, db):
                keys = _keys(r.expect)
                kb.append(keys)
                want = observe(p, keys)
                support = None
                if not canonical and p.mode == "sampling" and p.probs is not None:
                    support = [int(i) for i in torch.nonzero(p.probs > 0).flatten().tolist()]
                    if a.token is not None and a.token != p.token and a.token in support:
                        # Another RNG drew another kept token: predict the
                        # token-dependent outputs at the token it drew.
                        at = token_outputs(r.to_row(), a.token, p.raw_logprobs, p.probs, impl.profile)
                        want.update({k: v for k, v in at.items() if k in want})
                        if "top_logprobs" in want and want["top_logprobs"] is not None:
                            want["top_logprobs"] = [[int(i), float(v)] for i, v in want["top_logprobs"]]
                got = observe(a, keys)
                bad = mismatches(got, want, case.atol, case.rtol, token_in_support=support)
                d_obs = observe(d, keys)
                if (support is not None and d.mode == "sampling" and d.probs is not None
                        and torch.equal(d.probs > 0, p.probs > 0)):
                    # Under another RNG a single draw shows the support, not the stream: two
                    # predictions with one support differ by design only where that shows.
                    for k in DRAW_KEYS & set(d_obs):
                        d_obs[k] = want.get(k)
                diff = mismatches(want, d_obs, case.atol, case.rtol)
                where = f"{b.name}:{r.index}"
                rows.append({"row": where, "expected": r.expect, "predicted": want, "actual": got,
                             "default": observe(d, keys), "mismatches": bad, "profile_differences": diff})
                if bad:
                    own.append(where)
                if diff:
                    vs_default.append(where)
            keys_per_row.append(kb)
        details = {"rows": rows, "profile": impl.profile.name}
        if hand:
            details["message"] = ("the reference under the default profile disagrees with the case's hand-written "
                                  "expectations: " + "; ".join(f"{h['row']}: {', '.join(h['mismatches'])}" for h in hand))
            details["hand_mismatches"] = hand
            return Result(case.id, impl.name, "fail", case.check, details=details)
        if own:
            return self._mismatch(case, impl, version, details,
                                  f"{len(own)} row(s) differ from the {impl.profile.name} prediction: {', '.join(own)}")
        if vs_default:
            details["fields"] = self.explain(case, impl.profile, keys_per_row)
            details["message"] = (f"matches its profile {impl.profile.name!r}, which differs from the default on "
                                  f"{', '.join(vs_default)} because of: {', '.join(f['field'] for f in details['fields'])}")
            return Result(case.id, impl.name, "known-diff", case.check, details=details)
        details["message"] = "matches the prediction, which equals the default profile's"
        return Result(case.id, impl.name, "pass", case.check, details=details)

    def _mismatch(self, case, impl, version, details, message) -> Result:
        finding = match_finding(self.findings, impl.name, version, case.id)
        if finding:
            details["finding"] = dataclasses.asdict(finding)
            details["message"] = f"{message} — known bug {finding.id}: {finding.title}"
            return Result(case.id, impl.name, "known-bug", case.check, details=details)
        details["message"] = message
        return Result(case.id, impl.name, "fail", case.check, details=details)

    @staticmethod
    def _relations(case: Case, outputs: list) -> list:
        """Evaluate every invariant of ``case`` on ``outputs`` (one result list per batch)."""
        by_name = {b.name: out for b, out in zip(case.batches, outputs)}
        checks = []
        for inv in case.invariants:
            (na, ia), (nb, ib) = (inv[s].split(":") for s in ("a", "b"))
            ra, rb = by_name[na][int(ia)], by_name[nb][int(ib)]
            keys = ["token", "error", "finish_reason", "support"] if inv["kind"] == "same_result" else ["token", "error"]
            oa, ob = observe(ra, keys), observe(rb, keys)
            if inv["kind"] == "different_token":
                ok = oa["error"] is None and ob["error"] is None and oa["token"] != ob["token"]
                why = [] if ok else [f"both rows gave token {oa['token']!r} (errors {oa['error']!r}, {ob['error']!r})"]
            elif inv["kind"] == "prob_not_greater":
                # P_a(t) <= P_b(t) for each listed token, in the distribution each row
                # samples from (e.g. a stronger repetition penalty never raises a seen
                # token's probability); float32 rounding allowed for.
                why = []
                if ra.error or rb.error or ra.probs is None or rb.probs is None:
                    why.append(f"no distributions to compare (errors {ra.error!r}, {rb.error!r})")
                else:
                    for t in inv["tokens"]:
                        pa, pb = float(ra.probs[t]), float(rb.probs[t])
                        if pa > pb + 1e-7 + 1e-6 * pb:
                            why.append(f"token {t}: P_a = {pa:.9g} > P_b = {pb:.9g}")
                ok = not why
                oa["probs_at"] = {t: float(ra.probs[t]) for t in inv["tokens"]} if ra.probs is not None else None
                ob["probs_at"] = {t: float(rb.probs[t]) for t in inv["tokens"]} if rb.probs is not None else None
            else:
                why = mismatches(oa, ob)
                ok = not why
            checks.append({"kind": inv["kind"], "a": inv["a"], "b": inv["b"], "a_out": oa, "b_out": ob, "holds": ok,
                           "why": why})
        return checks

    @staticmethod
    def _by_chance(case: Case, pred: list, check: dict) -> bool:
        """Whether a relation's outcome is chance under an RNG that is not the canonical one.

        True when a row of the relation samples from more than one token under
        the implementation's profile and the two rows do not share a seed and
        a predicted distribution; a ``different_token`` relation between two
        seeded rows is always judged (a collision of two seeded streams on a
        wide distribution is evidence, as with seeds that differ only in their
        high bits), and so is a ``same_result`` relation between rows whose
        predicted supports differ (it compares the supports, which no draw
        decides).
        """
        by_name = {b.name: (b, out) for b, out in zip(case.batches, pred)}
        rows, outs = [], []
        for side in ("a", "b"):
            name, idx = check[side].split(":")
            b, out = by_name[name]
            rows.append(b.rows[int(idx)].to_row())
            outs.append(out[int(idx)])
        stochastic = any(o.error is None and o.probs is not None and int((o.probs > 0).sum()) > 1 for o in outs)
        if not stochastic:
            return False
        if check["kind"] == "prob_not_greater":
            return False  # a relation between distributions, not between draws
        both_seeded = rows[0].seed is not None and rows[1].seed is not None
        if check["kind"] == "different_token" and both_seeded:
            # two seeded streams that should differ: a collision is evidence (the
            # cases choose wide distributions), not chance
            return False
        same_seed = both_seeded and rows[0].seed == rows[1].seed
        same_dist = all(o.probs is not None for o in outs) and outs[0].probs.shape == outs[1].probs.shape and bool(
            torch.equal(outs[0].probs > 0, outs[1].probs > 0))
        if check["kind"] == "same_result" and not same_dist:
            # same_result compares the supports too: where the profile predicts different
            # supports (e.g. Hugging Face's default top_k = 50 on one row), the relation is
            # decided by the distributions, whatever the draws
            return False
        return not (same_seed and same_dist)

    def _invariant(self, case, impl, version, actual, hand) -> Result:
        checks = self._relations(case, actual)
        predicted = self._relations(case, self.predict(case, impl.profile))
        broken = [f"{c['kind']}({c['a']}, {c['b']}): {'; '.join(c['why'])}" for c in checks if not c["holds"]]
        details = {"invariants": checks, "profile": impl.profile.name}
        if hand:
            details["message"] = ("the reference under the default profile disagrees with the case's hand-written "
                                  "expectations: " + "; ".join(f"{h['row']}: {', '.join(h['mismatches'])}" for h in hand))
            return Result(case.id, impl.name, "fail", case.check, details=details)
        default_broken = [c for c in self._relations(case, self.predict(case, TRTLLM)) if not c["holds"]]
        if default_broken:
            details["message"] = ("the invariant does not hold for the reference under the default profile (the case "
                                  "or the reference is wrong): " + " | ".join(
                                      f"{c['kind']}({c['a']}, {c['b']}): {'; '.join(c['why'])}" for c in default_broken))
            return Result(case.id, impl.name, "fail", case.check, details=details)
        if impl.profile.rng != "canonical" and broken:
            # Under another RNG a relation between rows the profile makes stochastic
            # is a matter of chance unless both rows draw with the same seed from the
            # same distribution (seed isolation, which every engine owes). Such
            # relations are reported but not judged.
            pred_out = self.predict(case, impl.profile)
            chance = [self._by_chance(case, pred_out, c) for c in checks]
            for c, by_chance in zip(checks, chance):
                c["judged"] = not by_chance
            checks_j = [c for c, ch in zip(checks, chance) if not ch]
            predicted_j = [p for p, ch in zip(predicted, chance) if not ch]
            broken = [f"{c['kind']}({c['a']}, {c['b']}): {'; '.join(c['why'])}" for c in checks_j if not c["holds"]]
            unjudged = sum(chance)
            if unjudged:
                details["not_judged"] = (f"{unjudged} relation(s) between rows the {impl.profile.name!r} profile "
                                         "makes stochastic, without a shared seed: their outcome under another RNG is "
                                         "chance")
            checks, predicted = checks_j, predicted_j
        if broken and all(p["holds"] == c["holds"] for p, c in zip(predicted, checks)):
            # The profile itself predicts the broken relation: a design difference
            # (e.g. a spelling that one engine rejects), not a defect.
            details["fields"] = self.explain_relations(case, impl.profile, checks)
            details["message"] = (f"invariant broken as its profile {impl.profile.name!r} predicts: "
                                  + " | ".join(broken))
            return Result(case.id, impl.name, "known-diff", case.check, details=details)
        if broken:
            return self._mismatch(case, impl, version, details, "invariant broken: " + " | ".join(broken))
        details["message"] = f"{len(checks)} invariant(s) hold" + (
            f"; {details['not_judged']}" if details.get("not_judged") else "")
        return Result(case.id, impl.name, "pass", case.check, details=details)

    # -- statistical ---------------------------------------------------------
    def draw_counts(self, impl, row, seeds) -> np.ndarray:
        """Counts of ``len(seeds)`` draws of ``row`` from ``impl``, in a few batched calls.

        Uses the session's ``sample_many(row, seeds)`` when it has one (one
        call; the implementation batches internally). Otherwise replicates the
        row into batches of ``max(1, min(8192, 2**24 // V))`` copies (so a
        call holds at most ``2**24`` logits), copy ``j`` with its own seed
        and slot ``j``, each batch on a fresh session (every slot at offset
        0): ``ceil(N / batch)`` calls of ``step``, never one call per draw.

        Parameters
        ----------
        impl : Implementation
        row : impls.base.Row
            The row to draw from; its ``seed`` and ``slot`` are replaced.
        seeds : sequence of int
            One seed per draw (a ``range`` is fine).

        Returns
        -------
        numpy.ndarray
            ``(V,)`` int64 counts, summing to ``len(seeds)``.

        Raises
        ------
        RowError
            If the implementation rejects the row.
        ValueError
            If it returns a token outside ``[0, V)``, or counts of the wrong
            shape or total.
        """
        n, V = len(seeds), row.vocab
        session = impl.open_session(self.device)
        if hasattr(session, "sample_many"):
            counts = np.asarray(session.sample_many(row, seeds), dtype=np.int64)
            if counts.shape != (V,) or int(counts.sum()) != n or (counts < 0).any():
                raise ValueError(f"sample_many returned counts of shape {counts.shape} summing to "
                                 f"{int(counts.sum())}; expected ({V},) summing to {n}")
            return counts
        per_call = max(1, min(8192, (1 << 24) // max(V, 1)))  # rows per step call; bounds memory at 2**24 logits
        counts = np.zeros(V, dtype=np.int64)
        for start in range(0, n, per_call):
            part = seeds[start:start + per_call]
            outs = impl.open_session(self.device).step([row.replace(seed=int(s), slot=j) for j, s in enumerate(part)])
            toks = []
            for o in outs:
                if o.error:
                    raise RowError(o.error, o.message)
                toks.append(o.token)
            toks = np.asarray(toks, dtype=np.int64)
            if len(toks) and (toks.min() < 0 or toks.max() >= V):
                raise ValueError(f"token ids outside [0, {V}) returned: {sorted(set(toks[(toks < 0) | (toks >= V)].tolist()))[:5]}")
            counts += np.bincount(toks, minlength=V)
        return counts

    def _statistical(self, case, impl, version) -> Result:
        """Statistical check of every row of ``case`` (``harness.judge.stats``, DESIGN.md decision 3).

        Per row: the float64 prediction under the implementation's profile,
        a sample size from the power analysis (:func:`harness.judge.stats.plan_draws`,
        capped at the case's ``draws``), draws with seeds ``draw_seed + i``,
        then :func:`harness.judge.stats.check_draws` at the per-check level. A row
        whose prediction is an error, or that the test refuses to judge, makes
        the case an ``error``; any failed row a ``fail`` (or ``known-bug``).
        """
        default32 = self.predict(case, TRTLLM)
        default64 = self.predict(case, TRTLLM, torch.float64)
        pred64 = self.predict(case, impl.profile, torch.float64)
        epsilon = float(case.raw.get("epsilon", DEFAULT_EPSILON))
        rows, worst, errors, diffs, hand = [], [], [], [], []
        for b, d32b, d64b, p64b in zip(case.batches, default32, default64, pred64):
            for r, d32, d64, p64 in zip(b.rows, d32b, d64b, p64b):
                where = f"{b.name}:{r.index}"
                if r.expect:
                    bad = mismatches(observe(d32, _keys(r.expect)), r.expect, case.atol, case.rtol)
                    if bad:
                        hand.append(f"{where}: {', '.join(bad)}")
                if p64.error:
                    errors.append(f"{where}: the prediction is an error ({p64.error}); nothing to draw")
                    continue
                probs = p64.probs.to(torch.float64).cpu().numpy()
                plan = plan_draws(probs, self.alpha, epsilon, case.draws)
                row = r.to_row()
                try:
                    counts = self.draw_counts(impl, row, range(case.draw_seed, case.draw_seed + plan.n))
                except RowError as e:
                    worst.append(f"{where}: rejected the row ({e.kind}: {e.message})")
                    continue
                res = check_draws(counts, probs, self.alpha, FAMILY_ALPHA, plan)
                diff = mismatches(observe(p64, ["support", "probs"]), observe(d64, ["support", "probs"]), 1e-9, 1e-9)
                if diff:
                    diffs.append(where)
                rows.append({"row": where, **res.to_json(), "profile_differences": diff, "expected": r.expect})
                if res.verdict == "fail":
                    worst.append(f"{where}: {res.reason}")
                elif res.verdict == "error":
                    errors.append(f"{where}: {res.reason}")
        details = {"rows": rows, "profile": impl.profile.name, "alpha": self.alpha, "family_alpha": FAMILY_ALPHA,
                   "epsilon": epsilon, "target_power": TARGET_POWER,
                   "test": "support check, then an exact multinomial test (support of 2-3 tokens) or the G-test "
                           "with Williams' correction on bins with expected count >= 5; N from a power analysis"}
        if hand:
            details["message"] = "the reference under the default profile disagrees with the case's hand-written " \
                                 "expectations: " + "; ".join(hand)
            return Result(case.id, impl.name, "fail", case.check, details=details)
        if worst:
            return self._mismatch(case, impl, version, details, " | ".join(worst))
        if errors:
            details["message"] = " | ".join(errors)
            return Result(case.id, impl.name, "error", case.check, details=details)
        if diffs:
            keys = [[["support", "probs"] for _ in b.rows] for b in case.batches]
            details["fields"] = self.explain(case, impl.profile, keys)
            details["message"] = (f"draws fit its profile {impl.profile.name!r}, whose distribution differs from the "
                                  f"default on {', '.join(diffs)}")
            return Result(case.id, impl.name, "known-diff", case.check, details=details)
        details["message"] = "; ".join(f"{r['row']}: {r['reason']}" for r in rows)
        return Result(case.id, impl.name, "pass", case.check, details=details)
