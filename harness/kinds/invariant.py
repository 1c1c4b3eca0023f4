"""``check = "invariant"``: relations between rows of different batches, on the implementation's own outputs.

Relations need no agreement on semantics (DESIGN.md decision 4): ``same_token``,
``same_result`` (token, error, finish reason, support), ``different_token`` and
``prob_not_greater`` (``P_a(t) <= P_b(t)`` for listed tokens). :meth:`InvariantKind.evaluate`:

1. the relations must hold for the reference under the default profile (else the case or
   the reference is wrong), and the rows' ``expect`` must match it (and each
   ``expect_by_profile`` entry the prediction of its profile);
2. the implementation runs each batch on a fresh session and the relations are checked
   on its outputs; each row with a hand-written truth is compared with the prediction of
   the implementation's profile, as an exact row is
   (:func:`harness.kinds.exact.compare_rows`); under an RNG that is not the canonical one, a relation between rows
   the profile makes stochastic is chance unless both draw with one seed from one
   distribution, and is reported but not judged (:func:`by_chance`);
3. a broken relation its own profile predicts broken is ``known-diff`` (the profile
   fields that break it named, alone or in pairs); any other broken relation is a
   mismatch.
"""

from __future__ import annotations

from typing import Optional

import torch

from harness.corpus import truths
from harness.corpus.limits import MAX_ROW_INDEX_DIGITS
from harness.corpus.load import CaseError, vocab_of
from harness.judge.blame import blame, field_entries, suspects
from harness.judge.compare import mismatches, observe
from harness.judge.verdict import Evidence, verdict
from impls.profiles import TRTLLM, Profile
from impls.reference.modes import effective_seed

from .rows import RowsKind, where

__all__ = ["InvariantKind", "relations", "by_chance"]

#: ``"batch:index"`` (a batch's name, a row index of at most MAX_ROW_INDEX_DIGITS digits).
_ROW_REF = rf"^[\w-]+:[0-9]{{1,{MAX_ROW_INDEX_DIGITS}}}$"
_INVARIANTS = {"type": "array", "minItems": 1, "items": {
    "type": "object", "required": ["kind", "a", "b"], "additionalProperties": False,
    "properties": {"kind": {"enum": ["same_token", "same_result", "different_token", "prob_not_greater"]},
                   "a": {"type": "string", "pattern": _ROW_REF},
                   "b": {"type": "string", "pattern": _ROW_REF},
                   "tokens": {"type": "array", "minItems": 1, "items": {"type": "integer"}},
                   "holds_by_profile": {"type": "object", "additionalProperties": {"type": "boolean"}}}}}


def relations(case, outputs: list) -> list:
    """Evaluate every invariant of ``case`` on ``outputs`` (one result list per batch).

    Returns
    -------
    list of dict
        ``{"kind", "a", "b", "a_out", "b_out", "holds", "why"}`` per invariant.
    """
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


def by_chance(case, pred: list, check: dict, profile: Optional[Profile] = None) -> bool:
    """Whether a relation's outcome is chance under an RNG that is not the canonical one.

    True when a row of the relation samples from more than one token under
    the implementation's profile and the two rows do not share a seed and
    a predicted distribution; a ``different_token`` relation between two
    seeded rows is always judged (a collision of two seeded streams on a
    wide distribution is evidence, as with seeds that differ only in their
    high bits), and so is a ``same_result`` relation between rows whose
    predicted supports differ (it compares the supports, which no draw
    decides). A row counts as seeded when ``profile`` reads its seed
    (:func:`impls.reference.modes.effective_seed`: under ``seeds_honoured = false``
    no row is).
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
    def read(r) -> bool:  # the profile reads the row's seed (an invalid seed is the row's error, not chance)
        try:
            return profile is None or effective_seed(r, profile) is not None
        except (TypeError, ValueError):
            return True
    seeded = [r.seed is not None and read(r) for r in rows]
    both_seeded = all(seeded)
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


def _line(c: dict) -> str:
    return f"{c['kind']}({c['a']}, {c['b']}): {'; '.join(c['why'])}"


class InvariantKind(RowsKind):
    """Relations between rows that every implementation owes, whatever its semantics."""

    name = "invariant"
    case_fields = {**RowsKind.case_fields, "invariants": _INVARIANTS}
    exclusive_fields = ("invariants",)

    def load(self, data: dict, shown: str) -> tuple:
        """The batches, and ``invariants`` (required), each naming two rows that exist."""
        attrs, used = super().load(data, shown)
        if "invariants" not in data:
            raise CaseError(shown, "invariants", "required when check = 'invariant'")
        by_name = {b.name: b for b in attrs["batches"]}
        for i, inv in enumerate(data["invariants"]):
            for side in ("a", "b"):
                name, idx = inv[side].split(":")
                if name not in by_name or int(idx) >= len(by_name[name].rows):
                    raise CaseError(shown, f"invariants[{i}].{side}", f"{inv[side]!r} names no row")
            if (inv["kind"] == "prob_not_greater") != ("tokens" in inv):
                raise CaseError(shown, f"invariants[{i}].tokens",
                                "required with kind 'prob_not_greater', and only allowed there")
            for side in ("a", "b"):
                name, idx = inv[side].split(":")
                V = vocab_of(by_name[name].rows[int(idx)].fields["logits"])
                bad = [t for t in inv.get("tokens", []) if not 0 <= t < V]
                if bad:
                    raise CaseError(shown, f"invariants[{i}].tokens", f"ids {bad[:5]} outside [0, {V}), the "
                                                                      f"vocabulary of row {inv[side]!r}")
            for name in inv.get("holds_by_profile", {}):
                if name == truths.default_profile_name():
                    raise CaseError(shown, f"invariants[{i}].holds_by_profile.{name}",
                                    f"{name!r} is the default profile: every relation must hold under it")
                if name not in truths.profile_names():
                    raise CaseError(shown, f"invariants[{i}].holds_by_profile.{name}",
                                    f"unknown profile {name!r}; known: {', '.join(truths.profile_names())}")
        attrs["invariants"] = data["invariants"]
        return attrs, used

    def truth_profiles(self, case) -> set:
        """The rows' truths' profiles, the default (its relations must hold), and those of ``holds_by_profile``."""
        out = super().truth_profiles(case) | {TRTLLM.name}
        for inv in case.invariants:
            out |= set(inv.get("holds_by_profile", {}))
        return out

    def relation_truths(self, case, checks: list, truth_name: str) -> list:
        """Where predicted relations contradict the case for ``truth_name``: under the default every
        relation holds; under another profile, the relations with a ``holds_by_profile`` entry for it.

        Returns
        -------
        list of str
            ``"<kind>(<a>, <b>): predicted to hold: False, the case says True under <profile>"``.
        """
        out = []
        for inv, c in zip(case.invariants, checks):
            want = True if truth_name == TRTLLM.name else inv.get("holds_by_profile", {}).get(truth_name)
            if want is not None and bool(c["holds"]) != want:
                out.append(f"{c['kind']}({c['a']}, {c['b']}): predicted to hold: {bool(c['holds'])}, the case says "
                           f"{want} under {truth_name}")
        return out

    def truth_mismatches(self, judge, case, profile: Profile, truth_name: str) -> list:
        """The rows' truths (:meth:`RowsKind.truth_mismatches`) and the relations' (:meth:`relation_truths`)."""
        pred = self.predict(judge, case, profile, cache=False)
        rows = [f"{h['row']}: {'; '.join(h['mismatches'])}" for h in self.hand(judge, case, pred, profile, truth_name)]
        return rows + self.relation_truths(case, relations(case, pred), truth_name)

    def predicted_relations(self, judge, case, profile: Profile) -> list:
        """Whether each relation holds for the reference under ``profile`` (not cached)."""
        return [bool(c["holds"]) for c in relations(case, self.predict(judge, case, profile, cache=False))]

    def explain_relations(self, judge, case, profile: Profile, checks: list) -> list:
        """Profile fields that break a relation broken in ``checks``: alone, else in pairs (:func:`harness.judge.blame.blame`).

        Falls back to :meth:`RowsKind.explain` on the rows' tokens and errors when
        neither a field nor a pair breaks one.

        Returns
        -------
        list of dict
            Fields found only in pairs are marked ``"combination"``.
        """
        broken = {(c["kind"], c["a"], c["b"]) for c in checks if not c["holds"]}

        def breaks(probe_profile) -> bool:
            return any((c["kind"], c["a"], c["b"]) in broken and not c["holds"]
                       for c in relations(case, self.predict(judge, case, probe_profile, cache=False)))
        found, together = blame(profile, breaks, pairs=True)
        if not found:
            return self.explain(judge, case, profile, [[["token", "error"] for _ in b.rows] for b in case.batches])
        return field_entries(profile, found, together)

    def evaluate(self, judge, case, impl, version: str):
        """Judge an invariant case (the module docstring's steps)."""
        from .exact import compare_rows
        default = self.predict(judge, case, TRTLLM)
        hand = self.hand(judge, case, default)
        actual = self.run(judge, case, impl)
        checks = relations(case, actual)
        pred = self.predict(judge, case, impl.profile)
        predicted = relations(case, pred)
        broken = [_line(c) for c in checks if not c["holds"]]
        name = impl.profile.name
        ev = Evidence(details={"invariants": checks, "profile": name})
        # rows with a hand-written truth: their outputs against the profile's prediction, as exact rows
        rows, own_rows, _, _ = compare_rows(self, judge, case, impl, actual, pred, default)
        with_truth = {where(b, r) for b in case.batches for r in b.rows if r.expect or r.expect_by_profile}
        rows = [x for x in rows if x["row"] in with_truth]
        own_rows = [x for x in own_rows if x in with_truth]
        if rows:
            ev.details["rows"] = rows
        if name != TRTLLM.name and name in self.truth_profiles(case):
            mine = [f"{h['row']}: {', '.join(h['mismatches'])}" for h in self.hand(judge, case, pred, impl.profile)]
            mine += self.relation_truths(case, predicted, name)
            if mine:
                ev.details["profile_truth_mismatches"] = mine
                ev.profile_truth = "; ".join(mine)
                ev.suspects = lambda: suspects(impl.profile, lambda probe_profile: not self.truth_mismatches(
                    judge, case, probe_profile, name))
        default_broken = [c for c in relations(case, default) if not c["holds"]]
        if hand:
            ev.broken_case = "; ".join(f"{h['row']}: {', '.join(h['mismatches'])}" for h in hand)
        elif default_broken:
            ev.broken_case = ("the invariant does not hold for the reference under the default profile: "
                              + " | ".join(_line(c) for c in default_broken))
        if impl.profile.rng != "canonical" and broken:
            # Under another RNG a relation between rows the profile makes stochastic
            # is a matter of chance unless both rows draw with the same seed from the
            # same distribution (seed isolation, which every engine owes). Such
            # relations are reported but not judged.
            chance = [by_chance(case, pred, c, impl.profile) for c in checks]
            for c, ch in zip(checks, chance):
                c["judged"] = not ch
            checks_j = [c for c, ch in zip(checks, chance) if not ch]
            predicted = [p for p, ch in zip(predicted, chance) if not ch]
            broken = [_line(c) for c in checks_j if not c["holds"]]
            if sum(chance):
                ev.details["not_judged"] = (f"{sum(chance)} relation(s) between rows the {name!r} profile makes "
                                            "stochastic, without a shared seed: their outcome under another RNG is "
                                            "chance")
            checks = checks_j
        as_predicted = all(p["holds"] == c["holds"] for p, c in zip(predicted, checks))
        own = []
        if broken and not as_predicted:
            own.append("invariant broken: " + " | ".join(broken))
        if own_rows:
            own.append(f"{len(own_rows)} row(s) differ from the {name} prediction: {', '.join(own_rows)}")
        if own:
            ev.own = "; ".join(own)
        # The profile itself predicts the broken relation: a design difference
        # (e.g. a spelling that one engine rejects), not a defect.
        ev.differs = bool(broken) and as_predicted
        judged = checks
        ev.explain = lambda: self.explain_relations(judge, case, impl.profile, judged)
        ev.diff_message = lambda fields: f"invariant broken as its profile {name!r} predicts: " + " | ".join(broken)
        ev.pass_message = f"{len(checks)} invariant(s) hold" + (
            f"; {ev.details['not_judged']}" if ev.details.get("not_judged") else "")
        return verdict(judge, case, impl, version, ev)
