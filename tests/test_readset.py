"""Reuse of predictions across profiles that agree on the fields read (harness/judge/readset.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.corpus.load import load_case
from harness.judge.judge import Judge
from harness.judge.mutation import flipped, flips
from harness.judge.readset import ReadSetMemo, recording
from impls.profiles import HF, TRTLLM


def test_reads_are_recorded_and_reused_only_where_they_agree():
    memo = ReadSetMemo()
    calls = []

    def compute(p):
        calls.append(1)   # (reading p.name here would make every differently named profile a miss)
        return p.temperature_zero if p.min_p_forces_sampling else p.rank_rule

    a = memo.get("k", TRTLLM, compute)
    # a profile differing only in fields the computation did not read: reused
    other = dataclasses.replace(TRTLLM, name="x", rank_rule="greater_equal", seeds_honoured=False)
    assert memo.get("k", other, compute) == a and len(calls) == 1
    # differing in a field read: computed afresh (and the branch reads another field)
    flip = dataclasses.replace(TRTLLM, name="y", min_p_forces_sampling=False)
    assert memo.get("k", flip, compute) == TRTLLM.rank_rule and len(calls) == 2
    flip2 = dataclasses.replace(flip, name="z", rank_rule="greater_equal")
    assert memo.get("k", flip2, compute) == "greater_equal" and len(calls) == 3
    assert memo.get("k", dataclasses.replace(flip, name="w", temperature_zero="error"), compute) == TRTLLM.rank_rule
    assert len(calls) == 3 and memo.hits == 2
    # another key never shares
    memo.get("k2", TRTLLM, compute)
    assert len(calls) == 4
    # a read of the name (a field like any other) makes profiles of other names differ
    named = ReadSetMemo()
    named.get("k", TRTLLM, lambda p: p.name)
    assert named.get("k", dataclasses.replace(TRTLLM, name="x"), lambda p: p.name) == "x"


def test_recording_copy_equals_the_profile_in_every_field():
    rec = recording(HF)
    assert isinstance(rec, type(HF)) and rec.semantic_fields() == HF.semantic_fields() and rec.name == HF.name
    assert dataclasses.replace(rec, name="copy").semantic_fields() == HF.semantic_fields()


@pytest.mark.parametrize("case_id", ["invariants/greedy-tie-lowest-id-literal", "filters/top-p-nucleus-statistical",
                                     "invariants/neutral-sentinels-small-vocab-top-k-off",
                                     "invariants/repetition-penalty-monotone-negative-logit"])
def test_memoised_predictions_equal_fresh_ones_under_every_flip(case_id):
    # Every flip of the hf profile and of the default (harness/judge/mutation.py), predicted through one
    # judge (reusing what it can) and by a fresh reference: the same outputs, row for row.
    from pathlib import Path
    from harness.kinds.rows import RowsKind
    from impls.reference import Reference
    case = load_case(Path("cases") / f"{case_id}.toml")
    judge = Judge([], 1)
    probes = [TRTLLM, HF] + [flipped(p, f, v) for p in (HF, TRTLLM) for f, v in flips(p)]
    probes += [dataclasses.replace(TRTLLM, name=f"pair{i}", **{f: getattr(HF, f), g: getattr(HF, g)})
               for i, (f, g) in enumerate(zip(list(HF.semantic_fields())[::7], list(HF.semantic_fields())[3::7]))]
    for probe in probes:
        got = case.kind.predict(judge, case, probe, cache=False)
        for b, out in zip(case.batches, got):
            fresh = Reference(probe).open_session("cpu").step([r.to_row() for r in b.rows])
            for x, y in zip(out, fresh):
                assert (x.token, x.error, x.mode) == (y.token, y.error, y.mode), (probe.name, b.name)
                assert (x.probs is None) == (y.probs is None)
                if x.probs is not None:
                    assert torch.equal(x.probs, y.probs), (probe.name, b.name)
    assert judge.readsets.hits > 0
    assert isinstance(case.kind, RowsKind)
