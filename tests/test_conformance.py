"""The adapter conformance kit (harness/conformance.py): each planted defect is found and located."""

import pytest

from harness.cli import main
from harness.conformance import assert_conforms, protocol_checks
from impls.base import RowResult
from impls.profiles import TRTLLM
from impls.reference import Reference


class Good(Reference):
    def __init__(self):
        super().__init__(TRTLLM, name="good")


class Limited(Good):
    """A :class:`Good` that allows no statistical draws on the CPU (``draw_limits``)."""
    draw_limits = {"cpu": (0, "slow here")}


def _with_step(fix):
    """A Reference whose session's step output passes through ``fix(rows, out) -> out``."""
    class Planted(Reference):
        def __init__(self):
            super().__init__(TRTLLM, name="planted")

        def open_session(self, device="cpu"):
            inner = super().open_session(device)

            class S:
                def step(self, rows):
                    return fix(rows, inner.step(rows))
            return S()
    return Planted()


def _checks(impl) -> list:
    return [(p.check, p.message) for p in protocol_checks(impl)]


def test_a_correct_implementation_has_no_problem():
    assert protocol_checks(Good()) == []


def test_one_result_short():
    found = _checks(_with_step(lambda rows, out: out[:-1]))
    assert ("step-length", "step() on 3 rows returned 2 results (impls/base.py Session.step: one RowResult per "
                           "row, in order)") in found


def test_token_outside_the_vocabulary_and_both_token_and_error():
    def fix(rows, out):
        out[0].token = rows[0].vocab
        if len(out) > 2:
            out[2].error = "nan_logits"
        return out
    found = _checks(_with_step(fix))
    assert ("token-range", "step(), row 0: token 5 outside the vocabulary [0, 5)") in found
    # row 2 is [0, 0, 4, 1, 1]: greedy (nothing set) picks token 2
    assert ("token-xor-error", "step(), row 2: token=2, error='nan_logits': exactly one is set (impls/base.py "
                               "RowResult)") in found


def test_unknown_error_kind():
    def fix(rows, out):
        return [RowResult(error="oops")] + out[1:]
    found = _checks(_with_step(fix))
    assert ("error-kind", "step(), row 0: error kind 'oops' is not one of the fixed kinds (impls/params.py ERRORS; "
                          "cases/README.md, error kinds)") in found


def test_a_reused_slot_must_be_the_later_rows_error():
    def fix(rows, out):
        return [RowResult(token=0) if r.error == "duplicate_slot" else r for r in out]
    found = _checks(_with_step(fix))
    assert ("duplicate-slot", "row 1 reuses slot 0 and got token 0, want error 'duplicate_slot' "
                              "(impls/base.py claim_slot)") in found


def test_a_step_that_raises_instead_of_failing_a_row():
    def fix(rows, out):
        raise ValueError("bad row")
    found = dict(_checks(_with_step(fix)))
    assert found["step"].startswith("step() on 3 plain rows raised ValueError: bad row (a bad row is that row's error")


def test_a_seeded_row_must_repeat_on_a_fresh_session():
    counter = iter(range(1000))

    def fix(rows, out):
        for r in out:
            if r.token is not None and r.mode == "sampling":
                r.token = next(counter) % rows[0].vocab
        return out
    found = dict(_checks(_with_step(fix)))
    assert found["seed-fresh-session"].startswith("one seeded row on two fresh sessions gave tokens 0 and 1")


def test_the_declaration_is_checked():
    impl = Good()
    impl.features = frozenset({"top_k", "tfs_z"})
    impl.devices = frozenset({"tpu"})
    impl.stages = {"sorting": "own"}
    found = dict(_checks(impl))
    assert found["features"] == "unknown feature(s) ['tfs_z'] (cases/features.txt lists the known)"
    assert found["devices"].startswith("devices is frozenset({'tpu'}): a non-empty frozenset of cpu, cuda")
    assert found["stages"] == ("good: stages: unknown stage 'sorting'; known: validation, logit_bias, penalties, bans, "
                               "filters, draw, seeds, logprobs, finish, decode, beam, speculative (impls/base.py "
                               "STAGES, PROVENANCE)")


@pytest.mark.parametrize("limits,shown", [
    ({"cpu": (-5, "slow")}, "draw_limits entry 'cpu': (-5, 'slow'): a dict of device kind (cpu, cuda) -> a tuple"),
    ({"tpu": (10, "slow")}, "draw_limits entry 'tpu': (10, 'slow'): a dict"),
    ({"cpu": (10, " ")}, "draw_limits entry 'cpu': (10, ' '): a dict"),
    ({"cpu": [10, "slow"]}, "draw_limits entry 'cpu': [10, 'slow']: a dict"),
    ({"cpu": (True, "slow")}, "draw_limits entry 'cpu': (True, 'slow'): a dict"),
    ("cpu", "draw_limits is 'cpu': a dict of device kind (cpu, cuda) -> a tuple (most draws per statistical row, "
            "an int >= 0; why, a non-empty str)"),
])
def test_draw_limits_are_checked_entry_by_entry(limits, shown):
    impl = Good()
    impl.draw_limits = limits
    assert dict(_checks(impl))["draw_limits"].startswith(shown)


def test_unavailable_stops_the_checks():
    impl = Good()
    impl.available = lambda device: "no engine here"
    assert _checks(impl) == [("available", "not available on cpu: no engine here (the other checks need it)")]


def test_assert_conforms_and_the_command(capsys):
    assert_conforms(Good(), smoke_corpus=False)
    with pytest.raises(AssertionError, match=r"FAIL step-length"):
        assert_conforms(_with_step(lambda rows, out: out[:-1]), smoke_corpus=False)
    assert main(["check-impl", "reference"]) == 0
    out = capsys.readouterr().out
    assert "reference: protocol checks: 0 problem(s)" in out and "smoke corpus (19 cases): 19 pass" in out
    assert main(["check-impl", "no-such-impl"]) == 2


def test_the_kit_lists_each_n_a_smoke_case_with_its_reason(capsys, tmp_path):
    """check-impl names every n/a smoke case and why (here the one statistical case, over ``draw_limits``), not
    a guessed cause."""
    assert main(["check-impl", "test_conformance:Limited", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert ("  N/A   filters/top-k-two-statistical: main:0: the check plans 99000 draws; good allows at most 0 per "
            "row on cpu: slow here") in out
    assert "1 of 19 smoke cases are n/a (each with its reason above)" in out


def test_a_changed_profile_field_needs_a_citation():
    import dataclasses
    impl = Good()
    impl.profile = dataclasses.replace(TRTLLM, name="mine", rng="other", top_p_rule="ascending_cumsum",
                                       citations={"rng": "my-org/engine:sampler.py@v1 sample"})
    assert ("citations", "profile 'mine': field(s) top_p_rule differ from the default profile without a citation "
                         "(Profile.citations: where the engine's rule was read, 'repo:path@version Symbol'; "
                         "docs/adapters.md, section 5)") in _checks(impl)


def test_the_run_judges_no_row_of_a_step_that_returns_too_few(tmp_path):
    """A batch whose step returns fewer results than rows is an error, never a verdict on the rows it did return."""
    from harness.run.runner import run
    out = run([_with_step(lambda rows, out: out[:-1])], ["greedy/argmax-ties-lowest-id"], tmp_path, progress=False,
              isolate=False)
    (r,) = out.doc["results"]
    assert r["status"] == "error" and r["details"]["message"] == (
        "TypeError: batch 'main': step() on 3 row(s) returned 2 item(s): one RowResult per row, in order "
        "(impls/base.py Session.step)")


def test_the_run_skips_an_implementation_whose_declaration_is_wrong(tmp_path):
    from harness.run.runner import run
    impl = Good()
    impl.features = frozenset({"top_kk"})
    out = run([impl], ["greedy/argmax-ties-lowest-id"], tmp_path, progress=False, isolate=False)
    assert [r["status"] for r in out.doc["results"]] == ["skip"]
    assert out.doc["run"]["impls"]["good"]["skip_reason"] == (
        "its declaration is invalid: unknown feature(s) ['top_kk'] (cases/features.txt lists the known)")


class Raising(Good):
    """A :class:`Good` whose ``draw_limits`` property raises (the user's own code)."""
    @property
    def draw_limits(self):
        raise RuntimeError("limits not loaded")


def test_a_raising_declaration_is_a_located_problem(tmp_path, capsys):
    assert dict(_checks(Raising()))["draw_limits"] == "reading draw_limits raised RuntimeError: limits not loaded"
    assert main(["check-impl", "test_conformance:Raising", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "draw_limits: reading draw_limits raised RuntimeError: limits not loaded" in out
    assert "Traceback" not in out


class RaisingAttribute(Good):
    """A :class:`Good` whose ``draw_limits`` property raises AttributeError (not a missing attribute)."""
    @property
    def draw_limits(self):
        return self.no_such_table


class RaisingProfile(Good):
    """A :class:`Good` whose ``profile`` property raises."""
    @property
    def profile(self):
        raise KeyError("vllm")

    @profile.setter
    def profile(self, value):
        pass


def test_an_attribute_error_inside_a_property_is_not_a_missing_attribute():
    assert dict(_checks(RaisingAttribute()))["draw_limits"] == (
        "reading draw_limits raised AttributeError: 'RaisingAttribute' object has no attribute 'no_such_table'")


def test_the_run_skips_an_implementation_whose_profile_raises(tmp_path):
    """The run reads a raising ``profile`` once, as a declaration problem, and skips the implementation (the
    results record the default profile for it), in process and in a worker."""
    from harness.run.runner import run
    for isolate in (False, True):
        out = run([RaisingProfile()] if not isolate else ["test_conformance:RaisingProfile"],
                  ["greedy/argmax-ties-lowest-id"], tmp_path / str(isolate), progress=False, isolate=isolate)
        assert [r["status"] for r in out.doc["results"]] == ["skip"], isolate
        meta = out.doc["run"]["impls"]["good"]
        assert meta["skip_reason"] == "its declaration is invalid: reading profile raised KeyError: 'vllm'", isolate
        assert meta["profile"] == "trtllm", isolate
