"""``check = "exact"``: each row's outputs against the prediction of the implementation's own profile.

:meth:`ExactKind.evaluate`, in order (cases/README.md, "Checks"):

1. the reference under the default profile against the case's hand-written ``expect``
   (a contradiction: the case or the reference is wrong), and the reference under the
   implementation's profile against the case's truth for that profile, where one is given
   (``expect_by_profile``: a contradiction, the profile is wrong);
2. the implementation runs each batch on a fresh session;
3. each row's outputs (the keys its truths read, plus token and error) against the
   reference under the implementation's profile; under an RNG that is not the canonical
   one (profile field ``rng``) a sampling row's token is checked as membership in the
   predicted support, and the outputs that follow from the token (logprobs, rank, top
   logprobs, finish reason) are predicted at the token it drew;
4. the profile's prediction against the default's (a difference: ``known-diff``, the
   profile fields responsible named);
5. the verdict ladder (:func:`harness.judge.verdict.verdict`).
"""

from __future__ import annotations

import torch

from harness.judge.compare import DRAW_KEYS, assertion_failures, mismatches, observe
from harness.judge.verdict import Evidence, verdict
from impls.profiles import TRTLLM
from impls.reference.sampler import token_outputs

from .rows import RowsKind, row_keys, where

__all__ = ["ExactKind", "compare_rows"]


def compare_rows(kind, judge, case, impl, actual: list, pred: list, default: list) -> tuple:
    """Rows of ``actual`` against ``pred`` (the implementation's profile) and ``pred`` against ``default``.

    Returns
    -------
    (list of dict, list of str, list of str, list)
        The result rows (``row``, ``expected``, ``predicted``, ``actual``, ``default``,
        ``mismatches``, ``profile_differences``), the rows that differ from the
        prediction, the rows whose prediction differs from the default's, and the keys
        compared per batch and row (for :meth:`RowsKind.explain`).
    """
    canonical = impl.profile.rng == "canonical"
    rows, own, vs_default, keys_per_row = [], [], [], []
    for b, ab, pb, db in zip(case.batches, actual, pred, default):
        kb = []
        for r, a, p, d in zip(b.rows, ab, pb, db):
            keys = row_keys(r)
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
            truth = r.truth(impl.profile.name)
            bad += assertion_failures(got, truth if truth is not None else r.expect)
            d_obs = observe(d, keys)
            if (support is not None and d.mode == "sampling" and d.probs is not None
                    and torch.equal(d.probs > 0, p.probs > 0)):
                # Under another RNG a single draw shows the support, not the stream: two
                # predictions with one support differ by design only where that shows.
                for k in DRAW_KEYS & set(d_obs):
                    d_obs[k] = want.get(k)
            diff = mismatches(want, d_obs, case.atol, case.rtol)
            label = where(b, r)
            rows.append({"row": label, "expected": truth if truth is not None else r.expect,
                         "expected_for": impl.profile.name if truth is not None else TRTLLM.name,
                         "predicted": want, "actual": got,
                         "default": observe(d, keys), "mismatches": bad, "profile_differences": diff})
            if bad:
                own.append(label)
            if diff:
                vs_default.append(label)
        keys_per_row.append(kb)
    return rows, own, vs_default, keys_per_row


class ExactKind(RowsKind):
    """Token, error, finish reason, logprobs, support, probabilities and rewritten logits, row by row."""

    name = "exact"

    def evaluate(self, judge, case, impl, version: str):
        """Judge an exact case (the module docstring's steps)."""
        default = self.predict(judge, case, TRTLLM)
        hand = self.hand(judge, case, default)
        actual = self.run(judge, case, impl)
        pred = self.predict(judge, case, impl.profile)
        rows, own, vs_default, keys = compare_rows(self, judge, case, impl, actual, pred, default)
        name = impl.profile.name
        ev = Evidence(details={"rows": rows, "profile": name})
        if hand:
            ev.details["hand_mismatches"] = hand
            ev.broken_case = "; ".join(f"{h['row']}: {', '.join(h['mismatches'])}" for h in hand)
        if name != TRTLLM.name and self.has_truths(case, name):
            mine = self.hand(judge, case, pred, impl.profile)
            if mine:
                ev.details["profile_truth_mismatches"] = mine
                ev.profile_truth = "; ".join(f"{h['row']}: {', '.join(h['mismatches'])}" for h in mine)
                ev.suspects = lambda: self.suspects(judge, case, impl.profile)
        if own:
            ev.own = f"{len(own)} row(s) differ from the {name} prediction: {', '.join(own)}"
        ev.differs = bool(vs_default)
        ev.explain = lambda: self.explain(judge, case, impl.profile, keys)
        ev.diff_message = lambda fields: (f"matches its profile {name!r}, which differs from the default on "
                                          f"{', '.join(vs_default)} because of: "
                                          f"{', '.join(f['field'] for f in fields)}")
        return verdict(judge, case, impl, version, ev)
