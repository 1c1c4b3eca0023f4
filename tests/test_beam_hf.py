"""Hugging Face's own beam search (``generate()`` with a scripted model) against the ``hf`` profile.

Item 7 of issue 3: transformers' beam loop is driven by :mod:`impls.transformers.beam`; every beam case it can
express must match the reference under the ``hf`` profile (``pass`` or ``known-diff``, never ``fail``).
"""

import glob

import pytest

pytest.importorskip("transformers")

from harness.corpus.load import CASES_DIR, load_case  # noqa: E402
from harness.judge.judge import Judge  # noqa: E402
from impls.transformers.scenario import TransformersBeamImpl  # noqa: E402


def test_generate_beam_search_matches_the_hf_profile():
    impl, judge = TransformersBeamImpl(), Judge([], 1)
    seen = {}
    for p in sorted(glob.glob(str(CASES_DIR / "beam" / "*.toml"))):
        res = judge.evaluate(load_case(p), impl, impl.version())
        seen[res.case] = res.status
        assert res.status in ("pass", "known-diff", "n/a"), (res.case, res.status, res.details.get("message"))
    assert sum(s != "n/a" for s in seen.values()) >= 10


def test_evicted_eos_hypothesis_is_a_documented_difference():
    res = Judge([], 1).evaluate(load_case(CASES_DIR / "beam/eos-evicted-hypothesis-lost.toml"),
                                TransformersBeamImpl(), "x")
    assert res.status == "known-diff"
    assert [f["field"] for f in res.details["fields"]] == ["beam_early_stopping_true"]
    assert res.details["rows"][0]["actual"]["beams"][0] == [5]
