"""Judging one case on one implementation: the statuses of DESIGN.md.

:meth:`Judge.evaluate` runs, in order:

1. feature check — a feature the implementation lacks (of the feature set the case's
   kind reads: :meth:`~harness.corpus.kinds.CheckKind.feature_set`), or an input it
   cannot express (:meth:`~harness.corpus.kinds.CheckKind.unsupported`), is ``n/a``
   (reason kept);
2. the case's check kind judges it (:meth:`~harness.corpus.kinds.CheckKind.evaluate`:
   predictions of the reference under the default and the implementation's own profile,
   the implementation's outputs, the comparison) and ends in the one verdict ladder,
   :func:`harness.judge.verdict.verdict`;
3. any exception of the implementation becomes an ``error`` with its message; nothing
   else is lost;
4. a verdict gets its provenance (:func:`harness.judge.provenance.provenance`): the stages
   the case exercises and whose code performs each, so counts can say how many verdicts the
   implementation's own code decided.

The judge holds what every kind shares: the registered findings, the per-check level of
the statistical budget, the device, a cache of predictions (:meth:`Judge.cached`) and
batched draws from an implementation (:meth:`Judge.draw_counts`).
"""

from __future__ import annotations

import time
import traceback
from typing import Callable, Optional

import numpy as np
import torch

from impls.base import RowError
from harness.corpus.findings import match_finding

from .provenance import provenance
from .result import STATUSES, Result
from .stats import FAMILY_ALPHA

__all__ = ["Result", "Judge", "STATUSES"]


class Judge:
    """Evaluates cases on implementations.

    Parameters
    ----------
    findings : list of Finding
        Registered engine bugs (``known-bug``).
    n_stat_checks : int
        Number of statistical checks in the declared corpus; the per-check
        level is ``FAMILY_ALPHA / n``.
    device : str
        ``"cpu"`` or ``"cuda"``.
    """

    def __init__(self, findings: list, n_stat_checks: int, device: str = "cpu"):
        self.findings = findings
        self.alpha = FAMILY_ALPHA / max(n_stat_checks, 1)
        self.device = device
        self._pred: dict = {}
        from .readset import ReadSetMemo
        #: Batch predictions reused across profiles that agree on the fields read (:mod:`.readset`).
        self.readsets = ReadSetMemo()
        #: Stages the sessions of the case being judged took from other code (:meth:`note_stages`).
        self._stage_notes: dict = {}

    # -- services for the check kinds ---------------------------------------------------
    def cached(self, key, compute: Callable[[], object], cache: bool = True):
        """``compute()``, kept under ``key`` when ``cache`` (predictions are reused across implementations).

        The probe profiles of :mod:`harness.judge.blame` (up to hundreds per case) pass
        ``cache=False``; their predictions are still reused where they read only fields on which
        they agree with an earlier profile (:attr:`readsets`, :mod:`.readset`).
        """
        if key in self._pred:
            return self._pred[key]
        out = compute()
        if cache:
            self._pred[key] = out
        return out

    def predict(self, case, profile, dtype: torch.dtype = torch.float32, cache: bool = True):
        """The reference's outputs for ``case`` under ``profile`` (:meth:`~harness.corpus.kinds.CheckKind.predict`).

        Parameters
        ----------
        case : harness.corpus.load.Case
        profile : Profile
        dtype : torch.dtype
            Working dtype of the reference (float64 for statistical predictions).
        cache : bool
            Keep the result for later calls.

        Returns
        -------
        object
            The kind's own shape: for the single-step kinds one list of
            :class:`~impls.base.RowResult` per batch.
        """
        return case.kind.predict(self, case, profile, dtype, cache)

    def note_stages(self, source) -> None:
        """Keep what ``source`` says its results took from code other than its implementation declares.

        ``source``: a session, or a scenario's :class:`~impls.reference.scenario_types.ScenarioResult`;
        either may have ``stages_used``, ``{stage: provenance}`` (vLLM's seeded rows that its engine loop
        could not draw: ``{"seeds": "adapter"}``, :class:`impls.vllm.session.VllmSession`; llama.cpp's
        completion path: :attr:`impls.llamacpp.LlamaCppImpl.completion_stages`). The case being judged then
        reports those stages so (:func:`.provenance.provenance`, ``overrides``).
        """
        self._stage_notes.update(getattr(source, "stages_used", None) or {})

    def finding(self, impl_name: str, version: str, case_id: str):
        """The registered finding covering ``case_id`` on ``impl_name`` at ``version``, or None."""
        return match_finding(self.findings, impl_name, version, case_id)

    # -- entry point -------------------------------------------------------
    def evaluate(self, case, impl, version: str) -> Result:
        """Judge ``case`` on ``impl`` (see the module docstring for the steps).

        Never raises for a problem of the implementation: exceptions become
        ``error`` results.
        """
        t0 = time.perf_counter()
        self._stage_notes = {}
        try:
            why = self._na(case, impl)
            if why:
                res = Result(case.id, impl.name, "n/a", case.check, details={"message": why})
            else:
                res = case.kind.evaluate(self, case, impl, version)
        except Exception as e:  # an implementation crash must not stop the run
            res = Result(case.id, impl.name, "error", case.check,
                         details={"message": f"{type(e).__name__}: {e}",
                                  "traceback": traceback.format_exc(limit=6)[-3000:]})
        try:
            res.provenance = provenance(case, impl, res.status, self._stage_notes)
        except (KeyError, ValueError) as e:  # a stage table or a declaration is incomplete: say so
            res = Result(case.id, impl.name, "error", case.check,
                         details={"message": f"cannot say whose code decided the verdict: {type(e).__name__}: {e}"})
        res.seconds = time.perf_counter() - t0
        return res

    @staticmethod
    def _na(case, impl) -> Optional[str]:
        missing = sorted(case.features - case.kind.feature_set(impl))
        if missing:
            return f"{impl.name} cannot express feature(s): {', '.join(missing)}"
        return case.kind.unsupported(case, impl)

    # -- draws ---------------------------------------------------------------
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
            self.note_stages(session)
            if counts.shape != (V,) or int(counts.sum()) != n or (counts < 0).any():
                raise ValueError(f"sample_many returned counts of shape {counts.shape} summing to "
                                 f"{int(counts.sum())}; expected ({V},) summing to {n}")
            return counts
        per_call = max(1, min(8192, (1 << 24) // max(V, 1)))  # rows per step call; bounds memory at 2**24 logits
        counts = np.zeros(V, dtype=np.int64)
        for start in range(0, n, per_call):
            part = seeds[start:start + per_call]
            session = impl.open_session(self.device)
            outs = session.step([row.replace(seed=int(s), slot=j) for j, s in enumerate(part)])
            self.note_stages(session)
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

    def draw_tokens(self, impl, row, seeds) -> np.ndarray:
        """The ``len(seeds)`` tokens of ``row`` from ``impl``, one per seed, in seed order.

        The session's ``draw_tokens(row, seeds)`` when it has one; otherwise, as :meth:`draw_counts`
        without ``sample_many``: batches of copies, copy ``j`` with its own
        seed and slot ``j``, each batch on a fresh session (every slot a new request). For an
        implementation whose RNG the reference models (:func:`impls.reference.seeds.draw_modelled`),
        compared token for token with :meth:`impls.reference.sampler.ReferenceSession.first_draws`.

        Returns
        -------
        numpy.ndarray
            ``(len(seeds),)`` int64 token ids.

        Raises
        ------
        RowError
            If the implementation rejects the row.
        ValueError
            If it returns a token outside ``[0, V)``.
        """
        n, V = len(seeds), row.vocab
        session = impl.open_session(self.device)
        if hasattr(session, "draw_tokens"):
            toks = np.asarray(session.draw_tokens(row, seeds), dtype=np.int64)
            self.note_stages(session)
            if toks.shape != (n,) or (n and (toks.min() < 0 or toks.max() >= V)):
                raise ValueError(f"draw_tokens returned {toks.shape[0]} tokens (expected {n}) or ids outside [0, {V})")
            return toks
        per_call = max(1, min(8192, (1 << 24) // max(V, 1)))
        out = []
        for start in range(0, n, per_call):
            part = seeds[start:start + per_call]
            session = impl.open_session(self.device)
            outs = session.step([row.replace(seed=int(s), slot=j) for j, s in enumerate(part)])
            self.note_stages(session)
            for o in outs:
                if o.error:
                    raise RowError(o.error, o.message)
                if not 0 <= o.token < V:
                    raise ValueError(f"token id {o.token} outside [0, {V}) returned")
                out.append(o.token)
        return np.asarray(out, dtype=np.int64)
