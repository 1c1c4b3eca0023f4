"""What the single-step kinds share (exact, statistical, invariant): batches of rows.

A case of these kinds gives ``rows`` (one batch, ``main``) or named ``batches``; each batch
runs on a fresh session of the implementation and of the reference
(:func:`harness.corpus.load.load_batches` loads them). :class:`RowsKind` holds the parts
that do not depend on the check: loading, the feature and row checks, predictions (one
list of :class:`~impls.base.RowResult` per batch), the case's hand-written truth against
the default profile, the profile fields behind a difference (:mod:`harness.judge.blame`),
golden records of rows, and the inputs the report shows.
"""

from __future__ import annotations

import json
import zlib
from typing import Optional

import torch

from harness.corpus.kinds import RECORD_KEYS, CheckKind
from harness.corpus.load import BATCH_FIELDS, load_batches
from harness.judge.blame import blame, field_entries
from harness.judge.compare import check_truth, golden_round, mismatches, observe, output_keys
from impls.profiles import TRTLLM, Profile
from impls.reference import Reference

__all__ = ["RowsKind", "expect_keys", "row_keys", "where"]


def expect_keys(expect: dict) -> list:
    """The output keys compared for a row: those its expectation reads
    (:func:`harness.judge.compare.output_keys`), plus ``token`` and ``error`` always."""
    return sorted(output_keys(expect) | {"token", "error"})


def row_keys(row) -> list:
    """The output keys compared for a row under every profile: what its ``expect`` and every
    ``expect_by_profile`` entry read (one set, so predictions of two profiles compare alike)."""
    keys = set(expect_keys(row.expect))
    for truth in row.expect_by_profile.values():
        keys |= set(expect_keys(truth))
    return sorted(keys)


def where(batch, row) -> str:
    """A row's label in results, ``"<batch>:<index>"``."""
    return f"{batch.name}:{row.index}"


class RowsKind(CheckKind):
    """Base of the kinds whose cases are batches of single-step rows."""

    case_fields = dict(BATCH_FIELDS)
    record_keys = RECORD_KEYS

    def load(self, data: dict, shown: str) -> tuple:
        """The batches (:func:`harness.corpus.load.load_batches`)."""
        batches, used = load_batches(data, shown)
        return {"batches": batches}, used

    def unsupported(self, case, impl) -> Optional[str]:
        """The first row ``impl.unsupported`` refuses, as ``"<batch>:<index>: <reason>"``."""
        for b in case.batches:
            for r in b.rows:
                why = impl.unsupported(r.to_row())
                if why:
                    return f"{where(b, r)}: {why}"
        return None

    def predict(self, judge, case, profile: Profile, dtype=torch.float32, cache: bool = True) -> list:
        """One list of reference :class:`~impls.base.RowResult` per batch, each batch on a fresh session.

        A batch's prediction is reused for a profile that agrees with an earlier one on every
        field that prediction read (:class:`harness.judge.readset.ReadSetMemo`).
        """
        def one(rows):
            return lambda p: Reference(p, dtype=dtype).open_session("cpu").step([r.to_row() for r in rows])

        def run():
            return [judge.readsets.get((case.id, i, dtype), profile, one(b.rows)) for i, b in enumerate(case.batches)]
        return judge.cached((case.id, profile, dtype), run, cache)

    def run(self, judge, case, impl) -> list:
        """The implementation's outputs: one list per batch, each batch on a fresh session.

        Raises
        ------
        TypeError
            ``step`` did not return one :class:`~impls.base.RowResult` per row (the judge makes the
            case an ``error`` with this message, never a verdict on the rows it did return).
        """
        from impls.base import RowResult
        out = []
        for b in case.batches:
            rows = [r.to_row() for r in b.rows]
            session = impl.open_session(judge.device)
            got = session.step(rows)
            judge.note_stages(session)
            if not isinstance(got, list) or len(got) != len(rows) or not all(isinstance(r, RowResult) for r in got):
                seen = f"{len(got)} item(s)" if isinstance(got, list) else f"a {type(got).__name__}"
                raise TypeError(f"batch {b.name!r}: step() on {len(rows)} row(s) returned {seen}: one RowResult per "
                                "row, in order (impls/base.py Session.step)")
            out.append(got)
        return out

    def hand(self, judge, case, pred: Optional[list] = None, profile: Profile = TRTLLM,
             truth_name: Optional[str] = None) -> list:
        """Rows whose hand-written truth for ``profile`` its prediction contradicts.

        Parameters
        ----------
        pred : list, optional
            The prediction under ``profile`` (computed when not given).
        profile : Profile
            The default (truth: ``expect``) or another profile (truth: its
            ``expect_by_profile`` entry; rows without one are skipped).
        truth_name : str, optional
            Whose truth to read (default ``profile.name``; a probe profile reads its origin's).

        Returns
        -------
        list of dict
            ``{"row", "mismatches"}`` per such row.
        """
        pred = self.predict(judge, case, profile) if pred is None else pred
        out = []
        for b, preds in zip(case.batches, pred):
            for r, p in zip(b.rows, preds):
                truth = r.truth(truth_name or profile.name)
                if truth:
                    bad = check_truth(observe(p, expect_keys(truth)), truth, case.atol, case.rtol)
                    if bad:
                        out.append({"row": where(b, r), "mismatches": bad})
        return out

    def has_truths(self, case, profile_name: str) -> bool:
        """Whether any row gives a hand-written truth for ``profile_name``."""
        return any(r.truth(profile_name) for b in case.batches for r in b.rows)

    def exercised_stages(self, case, output_stages: dict, error_stages: dict) -> set:
        """``draw`` (every row's token is compared), and the stages of the outputs and error kinds its truths check."""
        out = {"draw"}
        for b in case.batches:
            for r in b.rows:
                for truth in [r.expect, *r.expect_by_profile.values()]:
                    out |= {output_stages[k] for k in output_keys(truth) if k != "error"}
                    errors = [truth.get("error")] + [a.get("error") for a in truth.get("any_of") or []]
                    out |= {error_stages[e] for e in errors if e}
        return out

    def truth_profiles(self, case) -> set:
        """The profiles the case's rows give a truth for (the default's name where any row has ``expect``)."""
        out = set()
        for b in case.batches:
            for r in b.rows:
                out |= set(r.expect_by_profile) | ({TRTLLM.name} if r.expect else set())
        return out

    def truth_mismatches(self, judge, case, profile: Profile, truth_name: str) -> list:
        """:meth:`hand` as lines ``"<row>: <mismatch>; ..."``."""
        return [f"{h['row']}: {'; '.join(h['mismatches'])}"
                for h in self.hand(judge, case, self.predict(judge, case, profile, cache=False), profile, truth_name)]

    def suspects(self, judge, case, profile: Profile) -> list:
        """Profile fields one change of which makes ``profile`` agree with its truths (:func:`harness.judge.blame.suspects`)."""
        from harness.judge.blame import suspects
        return suspects(profile, lambda probe_profile: not self.hand(
            judge, case, self.predict(judge, case, probe_profile, cache=False), probe_profile, profile.name))

    def explain(self, judge, case, profile: Profile, keys_per_row: list) -> list:
        """Profile fields whose value alone changes the default prediction of ``case`` (:func:`harness.judge.blame.blame`).

        Parameters
        ----------
        keys_per_row : list of list of list of str
            Per batch, per row, the output keys compared.

        Returns
        -------
        list of dict
            :func:`harness.judge.blame.field_entries` for each responsible field;
            every differing field (marked ``"combination"``) when no single one is
            responsible.
        """
        default = self.predict(judge, case, TRTLLM)

        def changes(probe_profile) -> bool:
            pred = self.predict(judge, case, probe_profile, cache=False)
            return any(mismatches(observe(p, keys), observe(d, keys))
                       for bp, bd, bk in zip(pred, default, keys_per_row) for p, d, keys in zip(bp, bd, bk))
        found, _ = blame(profile, changes)
        return field_entries(profile, found) if found else field_entries(profile)

    # -- golden records ------------------------------------------------------------------
    def golden_record(self, judge, case, profile_name) -> dict:
        """``profile_name``: a registered profile's name, or a :class:`Profile` (a probe; not cached).

        Per row of every batch: token, error, mode, finish reason, RAW/PROCESSED logprobs (1e-6), rank, support,
        and ``rewritten_logits``, ``vocab_logprobs``, ``token_logprobs`` (each rounded to 1e-6, non-finite ones
        as strings: :func:`golden_round`) for a row whose truths check them (its ``expect`` or an ``expect_by_profile`` entry names them:
        :func:`row_keys`), under every profile.

        The support is listed up to 64 ids, otherwise its size and a CRC-32 of the ids.
        """
        from impls.profiles import PROFILES
        from impls.reference import REFERENCE_VERSION
        batches = []
        registered = isinstance(profile_name, str)
        profile = PROFILES[profile_name] if registered else profile_name
        profile_name = profile.name
        for b, preds in zip(case.batches, self.predict(judge, case, profile, cache=registered)):
            rows = []
            for r, p in zip(b.rows, preds):
                row = {"token": p.token, "error": p.error, "mode": p.mode, "finish_reason": p.finish_reason,
                       "logprob": golden_round(p.logprob), "processed_logprob": golden_round(p.processed_logprob),
                       "rank": p.rank}
                for key in ("rewritten_logits", "vocab_logprobs", "token_logprobs"):
                    if key in row_keys(r):   # vectors kept only where a truth checks them
                        v = observe(p, (key,))[key]
                        row[key] = None if v is None else golden_round(v)
                if p.probs is not None:
                    support = [int(i) for i in (p.probs > 0).nonzero().flatten().tolist()]
                    if len(support) <= 64:
                        row["support"] = support
                    else:
                        row["support_size"] = len(support)
                        row["support_crc32"] = zlib.crc32(json.dumps(support).encode())
                rows.append({k: v for k, v in row.items() if v is not None})
            batches.append({"name": b.name, "rows": rows})
        return {"case": case.id, "profile": profile_name, "reference_version": REFERENCE_VERSION, "batches": batches}

    def golden_diff(self, old: dict, new: dict) -> list:
        """``"<batch>:<i>.<key>: golden X, now Y"`` for every row key that changed.

        ``rewritten_logits`` of the same length are shown by the ids that changed, e.g.
        ``"main:0.rewritten_logits: 1 of 3 values differ: token 0: golden 6.0, now 5.0"`` (the
        first three such ids, then ``...``); a vector of more than 8 values on one side only
        is shown by its length.
        """
        def shown(v) -> str:
            return f"[{len(v)} values]" if isinstance(v, list) and len(v) > 8 else repr(v)

        diffs = []
        for bo, bn in zip(old.get("batches", []), new.get("batches", [])):
            for i, (ro, rn) in enumerate(zip(bo["rows"], bn["rows"])):
                for k in sorted(set(ro) | set(rn)):
                    was, now = ro.get(k), rn.get(k)
                    if was == now:
                        continue
                    at = f"{bn['name']}:{i}.{k}"
                    if k != "rewritten_logits":
                        diffs.append(f"{at}: golden {was!r}, now {now!r}")
                    elif isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
                        ids = [j for j, (x, y) in enumerate(zip(was, now)) if x != y]
                        each = "; ".join(f"token {j}: golden {was[j]!r}, now {now[j]!r}" for j in ids[:3])
                        diffs.append(f"{at}: {len(ids)} of {len(was)} values differ: {each}"
                                     + ("; ..." if len(ids) > 3 else ""))
                    else:
                        diffs.append(f"{at}: golden {shown(was)}, now {shown(now)}")
        return diffs

    # -- records and the report ----------------------------------------------------------
    def unseeded_rows(self, case) -> set:
        """Labels ``"batch:index"`` of the rows that give no ``seed``."""
        return {f"{b.name}:{i}" for b in case.batches for i, r in enumerate(b.rows) if "seed" not in r.fields}

    def report_inputs(self, case) -> list:
        """One entry per row (``where`` = ``batch:index``, as the judge names rows)."""
        return [{"where": where(b, r), "fields": dict(r.fields), "expect": dict(r.expect),
                 "expect_by_profile": {n: dict(t) for n, t in r.expect_by_profile.items()}}
                for b in case.batches for r in b.rows]

    def relations(self, case) -> list:
        """The case's ``[[invariants]]`` (empty for exact and statistical cases)."""
        return list(case.invariants)
