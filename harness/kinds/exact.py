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
   profile fields responsible named); under an RNG that is not canonical, where both keep
   one support, the default is predicted at the same token and the token-dependent
   outputs are compared at every token of the support (:func:`support_differences`);
5. the verdict ladder (:func:`harness.judge.verdict.verdict`).
"""

from __future__ import annotations

import torch

from harness.judge.compare import DRAW_KEYS, assertion_failures, close, mismatches, observe
from harness.judge.verdict import Evidence, verdict
from impls.params import end_id_set
from impls.profiles import TRTLLM
from impls.reference.finish import finish_reason
from impls.reference.logprobs import ranks, top_logprobs
from impls.reference.sampler import token_outputs

from .rows import RowsKind, row_keys, where

__all__ = ["ExactKind", "compare_rows", "support_differences"]


#: Token-dependent outputs that follow from the row and the profile's rules at any token.
_AT_ANY_TOKEN = ("logprob", "processed_logprob", "rank", "top_logprobs", "finish_reason")


def support_differences(row, support: list, pred, default, profile, keys, atol: float, rtol: float) -> list:
    """Where two predictions with one support differ at some token of it, whichever is drawn.

    Under an RNG that is not canonical the drawn token is any kept token, so a
    token-dependent output (logprob, processed logprob, rank, top logprobs, finish
    reason) whose rule differs between the profile and the default must be compared at
    every token of the support, not only at the token drawn (issue #20 item 1: logits
    ``[1, 1, 0]`` give rank 2 under vLLM's ``>=`` rule and 1 under the default).

    Parameters
    ----------
    row : impls.base.Row
    support : list of int
        The shared kept set.
    pred, default : impls.base.RowResult
        The predictions under ``profile`` and under the default profile (``raw_logprobs``
        and ``probs`` ``(V,)`` set).
    profile : Profile
        The implementation's profile.
    keys : list of str
        The output keys compared for the row (:func:`.rows.row_keys`).
    atol, rtol : float
        The case's tolerances.

    Returns
    -------
    list of str
        One line per differing key, e.g. ``"rank at token 0 of the support: got 2, want 1"``
        (got: the profile's prediction, want: the default's); empty when none differs.
    """
    want = [k for k in _AT_ANY_TOKEN if k in keys]
    if not want:
        return []
    ids = torch.tensor(support, dtype=torch.int64)
    vals = {}
    for name, res, prof in (("pred", pred, profile), ("default", default, TRTLLM)):
        lp, pr = res.raw_logprobs.to(torch.float64), res.probs.to(torch.float64)
        vals[name] = {
            "logprob": lp[ids].tolist(),
            "processed_logprob": torch.log(pr[ids]).tolist(),
            "rank": ranks(res.raw_logprobs, ids, prof.rank_rule).tolist(),
        }
        if row.logprobs is not None and row.logprobs >= 0:
            n_top = row.logprobs  # the head of the list: the same whichever token was drawn
            vals[name]["top_logprobs"] = top_logprobs(res.raw_logprobs, n_top,
                                                      int(torch.argmax(res.raw_logprobs)))[:n_top]
    out = []
    for k in want:
        if k == "finish_reason":
            # Only an EOS id or a stop word's last token finishes differently from the rest.
            special = set(end_id_set(row.end_id)) | {w[-1] for w in row.stop_words if w}
            probe = [t for t in support if t in special] + [next((t for t in support if t not in special), None)]
            for t in (t for t in probe if t is not None):
                g, w = finish_reason(row, t, profile), finish_reason(row, t, TRTLLM)
                if g != w:
                    out.append(f"finish_reason at token {t} of the support: got {g!r}, want {w!r}")
                    break
            continue
        if k not in vals["pred"]:
            continue
        g, w = vals["pred"][k], vals["default"][k]
        if k == "top_logprobs":
            if [i for i, _ in g] != [i for i, _ in w] or not all(close(a[1], b[1], atol, rtol) for a, b in zip(g, w)):
                out.append(f"top_logprobs at every token of the support (top {row.logprobs}): got "
                           f"{[[i, round(v, 6)] for i, v in g]}, want {[[i, round(v, 6)] for i, v in w]}")
            continue
        for t, a, b in zip(support, g, w):
            if not (a == b if k == "rank" else close(a, b, atol, rtol)):
                out.append(f"{k} at token {t} of the support: got {a:.9g}, want {b:.9g}" if k != "rank"
                           else f"rank at token {t} of the support: got {a}, want {b}")
                break
    return out


def _outputs_at(row, token: int, res, profile, keys) -> dict:
    """The token-dependent outputs of ``res`` (a prediction) at ``token``, reduced as :func:`observe`
    reduces them, for the keys of ``keys`` among :data:`DRAW_KEYS` (token itself excluded)."""
    at = token_outputs(row, token, res.raw_logprobs, res.probs, profile)
    out = {k: at[k] for k in DRAW_KEYS & set(keys) if k in at}
    if out.get("top_logprobs") is not None:
        out["top_logprobs"] = [[int(i), float(v)] for i, v in out["top_logprobs"]]
    return out


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
    from impls.reference.seeds import draw_modelled
    rows, own, vs_default, keys_per_row = [], [], [], []
    for b, ab, pb, db in zip(case.batches, actual, pred, default):
        kb = []
        for r, a, p, d in zip(b.rows, ab, pb, db):
            keys = row_keys(r)
            kb.append(keys)
            want = observe(p, keys)
            row = r.to_row()
            support = None
            if not draw_modelled(impl.profile, row) and p.mode == "sampling" and p.probs is not None:
                support = [int(i) for i in torch.nonzero(p.probs > 0).flatten().tolist()]
                if a.token is not None and a.token != p.token and a.token in support:
                    # Another RNG drew another kept token: predict the
                    # token-dependent outputs at the token it drew.
                    want.update(_outputs_at(row, a.token, p, impl.profile, want))
            got = observe(a, keys)
            bad = mismatches(got, want, case.atol, case.rtol, token_in_support=support)
            truth = r.truth(impl.profile.name)
            bad += assertion_failures(got, truth if truth is not None else r.expect)
            d_obs = observe(d, keys)
            one_support = (support is not None and d.mode == "sampling" and d.probs is not None
                           and torch.equal(d.probs > 0, p.probs > 0))
            if one_support:
                # Under another RNG a single draw shows the support, not the stream: the default
                # is predicted at the token the profile's prediction is read at ...
                tok = a.token if a.token is not None and a.token in support else p.token
                d_obs.update(_outputs_at(row, tok, d, TRTLLM, d_obs))
                d_obs["token"] = want.get("token")
            diff = mismatches(want, d_obs, case.atol, case.rtol)
            if one_support:
                # ... and the token-dependent outputs that agree there are compared at every kept token.
                same = [k for k in keys if not mismatches({k: want.get(k)}, {k: d_obs.get(k)}, case.atol, case.rtol)]
                diff += support_differences(row, support, p, d, impl.profile, same, case.atol, case.rtol)
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
            ev.own_rows = list(own)
        ev.differs = bool(vs_default)
        ev.explain = lambda: self.explain(judge, case, impl.profile, keys)
        ev.diff_message = lambda fields: (f"matches its profile {name!r}, which differs from the default on "
                                          f"{', '.join(vs_default)} because of: "
                                          f"{', '.join(f['field'] for f in fields)}")
        return verdict(judge, case, impl, version, ev)
