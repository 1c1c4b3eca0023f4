"""Speculative verification, issue #20 items 2, 4, 6 and 3b (SEMANTICS §4).

* min_length judges each verification position with the drafts ahead of it;
* a greedy request with literal drafts stays valid under ``greedy_as_top_k_1``;
* ``-1`` pads a literal draft list;
* a greedy row with no usable logit gets one answer on both paths.

Every expected value is derived by hand in the comment above it.
"""

import math

import pytest
import torch

from impls.base import Row
from impls.profiles import FLASHINFER, HF, TRTLLM, VLLM
from impls.reference import Reference
from impls.reference.bans import min_length_bans
from impls.reference.sampler import ReferenceSession
from impls.reference.scenario import RequestSpec, ScenarioSpec, replicate, run_scenario
from impls.reference.scripted import TableModel
from impls.reference.speculative import examined_drafts, greedy_by_convention, target_distribution

NEG = float("-inf")
NAN = float("nan")
#: Greedy under every profile: temperature 0 (trtllm, vllm, flashinfer), do_sample False (hf).
GREEDY = {"prompt": [1], "temperature": 0.0, "do_sample": False}


def _row(v, at):
    r = [0.0] * v
    for t, x in at.items():
        r[t] = x
    return r


# V = 10, end id 2. pos0: argmax 7; pos1: 2 (3.0) above 8 (2.0); pos2: argmax 5.
ML_TABLE = TableModel([_row(10, {7: 3.0}), _row(10, {2: 3.0, 8: 2.0}), _row(10, {5: 3.0})])


def _one(fields, drafts, draft_len, model=ML_TABLE, profile=TRTLLM, max_steps=1, draft_model=None, session=None):
    spec = ScenarioSpec(model, [RequestSpec("a", 0, dict(fields), draft_len=draft_len, drafts=drafts)],
                        draft_model=draft_model, max_steps=max_steps)
    if session is not None:
        return run_scenario(spec, profile, session).requests["a"]
    return Reference(profile).run_scenario(spec).requests["a"]


def _steps(r):
    return [(s.tokens, s.accepted, s.rewind) for s in r.steps]


# -- item 2: min_length per verification position --------------------------------------------------

@pytest.mark.parametrize("profile", [TRTLLM, VLLM, HF, FLASHINFER])
def test_min_length_counts_the_drafts_ahead_of_the_position(profile):
    # The example: min_length 1, nothing generated, drafts [7, 2]. pos0: 0 < 1, 2 banned, argmax 7 = d0,
    # accepted. pos1: 0 + 1 >= 1, no ban, argmax 2 = d1, accepted, and 2 is the end id: END_ID, no bonus.
    r = _one({**GREEDY, "end_id": 2, "min_length": 1, "max_new_tokens": 4}, [[7, 2]], 2, profile=profile)
    assert _steps(r) == [([7, 2], 2, 0)]
    assert (r.tokens, r.finish_reason, r.finish_step, r.error) == ([7, 2], "end_id", 0, None)


def test_min_length_still_bans_positions_short_of_it():
    # min_length 2, drafts [7, 8, 2]; own table pos2: 2 (3.0) above 5 (2.0). pos0: 0 < 2 banned, 7 accepted.
    # pos1: 1 < 2, 2 banned, argmax 8 = d1 accepted. pos2: 2 >= 2, argmax 2 = d2 accepted: END_ID, accepted 3.
    model = TableModel([_row(10, {7: 3.0}), _row(10, {2: 3.0, 8: 2.0}), _row(10, {2: 3.0, 5: 2.0})])
    r = _one({**GREEDY, "end_id": 2, "min_length": 2, "max_new_tokens": 5}, [[7, 8, 2]], 3, model=model)
    assert _steps(r) == [([7, 8, 2], 3, 0)] and r.finish_reason == "end_id"
    # The same request with drafts [7, 2]: pos1 (1 < 2) bans 2, argmax 8 != 2: rejected, emits 8.
    r = _one({**GREEDY, "end_id": 2, "min_length": 2, "max_new_tokens": 5}, [[7, 2]], 2, model=model)
    assert _steps(r) == [([7, 8], 1, 1)] and r.finish_reason == "none"


def test_min_length_bans_the_eos_at_position_zero():
    # pos0 has nothing before it: 0 < 1, end id 2 banned, argmax 7 (2.0) != d0 = 2: rejected, emits 7.
    model = TableModel([_row(10, {2: 3.0, 7: 2.0})])
    r = _one({**GREEDY, "end_id": 2, "min_length": 1, "max_new_tokens": 1}, [[2, 7]], 2, model=model)
    assert _steps(r) == [([7], 0, 2)] and (r.finish_reason, r.finish_step) == ("length", 0)


def test_min_length_bans_reads_draft_position():
    # count = len(generated) + draft_position: 0 + 1 < 2 bans [2]; 0 + 2 = 2 does not; 1 + 1 = 2 does not.
    x = torch.zeros(10)
    assert min_length_bans(Row(logits=x, min_length=2, end_id=2, draft_position=1), TRTLLM) == [2]
    assert min_length_bans(Row(logits=x, min_length=2, end_id=2, draft_position=2), TRTLLM) == []
    assert min_length_bans(Row(logits=x, min_length=2, end_id=2, generated=[5], draft_position=1), TRTLLM) == []
    assert Row(logits=x).draft_position == 0


def test_penalties_still_read_the_finalised_history_only():
    # repetition 2, prompt [0]. pos0 [0, 0, 3, 0]: argmax 2 = d0. pos1 [0, 0, 2.5, 2]: the penalty sees only the
    # finalised history (prompt [0], nothing generated), so 2 stays 2.5 > 2: argmax 2 = d1 accepted (had the draft
    # ahead been counted, 2.5 / 2 = 1.25 < 2 and 3 would win). Bonus pos2 [3, 0, 0, 0]: 0 is in the prompt,
    # 3 / 2 = 1.5 is still the max: 0. tokens [2, 2, 0].
    model = TableModel([[0, 0, 3, 0], [0, 0, 2.5, 2], [3, 0, 0, 0]])
    r = _one({"prompt": [0], "repetition_penalty": 2.0, "max_new_tokens": 3}, [[2, 2]], 2, model=model)
    assert _steps(r) == [([2, 2, 0], 2, 0)]


def test_target_distribution_counts_the_drafts_ahead():
    # history (7,), base (): one draft ahead of position 1, 0 + 1 >= min_length 1, so 2 is not banned: one-hot 2.
    # With base = history the finalised count is 1 as well: one-hot 2. With min_length 2: 1 < 2 bans 2: one-hot 8.
    spec = ScenarioSpec(ML_TABLE, [RequestSpec("a", 0, {**GREEDY, "end_id": 2, "min_length": 1})])
    assert int(torch.argmax(target_distribution(spec, "a", TRTLLM, history=(7,), base=()))) == 2
    assert int(torch.argmax(target_distribution(spec, "a", TRTLLM, history=(7,)))) == 2
    spec2 = ScenarioSpec(ML_TABLE, [RequestSpec("a", 0, {**GREEDY, "end_id": 2, "min_length": 2})])
    assert int(torch.argmax(target_distribution(spec2, "a", TRTLLM, history=(7,), base=()))) == 8


# -- item 4: greedy requests under greedy_as_top_k_1 -----------------------------------------------

# V = 5, argmax by position: 2, 0, 3, 1, 2 (one maximum per row).
G_TABLE = TableModel([[0, 0, 3, 0, 0], [3, 0, 0, 0, 0], [0, 0, 0, 3, 0], [0, 3, 0, 0, 0], [0, 0, 3, 0, 0]])


@pytest.mark.parametrize("profile,offsets", [(TRTLLM, [[], []]), (FLASHINFER, [[0, 1, 2], [3, 4, 5]])])
def test_greedy_literal_drafts_stay_valid_under_greedy_as_top_k_1(profile, offsets):
    # Step 0 [2, 0]: both equal the argmax, bonus 3. Step 1 [1, 4] at pos3, pos4: 1 accepted, 4 != 2, emits 2.
    # Under flashinfer the request samples with top_k = 1 and q = one-hot(d): the same tokens, and K + 1 = 3
    # offsets a step from seed 9's slot; trtllm's greedy rows draw nothing.
    r = _one({**GREEDY, "seed": 9, "max_new_tokens": 5}, [[2, 0], [1, 4]], 2, model=G_TABLE, profile=profile,
             max_steps=4)
    assert r.error is None
    assert _steps(r) == [([2, 0, 3], 2, 0), ([1, 2], 1, 1)]
    assert [s.offsets for s in r.steps] == offsets
    assert (r.tokens, r.finish_reason, r.finish_step) == ([2, 0, 3, 1, 2], "length", 1)


def test_greedy_by_convention_names_only_rewritten_greedy_requests():
    spec = ScenarioSpec(G_TABLE, [RequestSpec("g", 0, dict(GREEDY)), RequestSpec("s", 1, {"temperature": 0.7})])

    class _R:  # what greedy_by_convention reads of a runner
        def __init__(self, profile):
            self.profile, self.spec = profile, spec

    assert greedy_by_convention(_R(FLASHINFER), spec.request("g")) is True
    assert greedy_by_convention(_R(FLASHINFER), spec.request("s")) is False   # a sampling request
    assert greedy_by_convention(_R(TRTLLM), spec.request("g")) is False       # GREEDY itself: no convention


def test_sampling_request_with_literal_drafts_still_needs_a_draft_model():
    # Not greedy under any rule: q must come from a draft model; without one, invalid_draft (unchanged).
    r = _one({"prompt": [1], "temperature": 0.7, "seed": 1, "max_new_tokens": 2}, [[2, 0]], 2, model=G_TABLE,
             profile=FLASHINFER)
    assert r.error == "invalid_draft" and "draft_model" in r.message


def test_greedy_tie_under_top_k_1_is_drawn_with_one_hot_q():
    # logits [1, 1, 0] at every position: top_k = 1 keeps both tied tokens, p = (1/2, 1/2, 0). Draft 1 with
    # q = one-hot(1): accepted iff u <= min(1, p(1) / 1) = 1/2; on rejection the residual max(0, p - q) =
    # (1/2, 0, 0) gives 0. So tokens[0] is 1 exactly when accepted, else 0, and P(accept) = 1/2.
    model = TableModel([[1.0, 1.0, 0.0]])
    spec = ScenarioSpec(model, [RequestSpec("a", 0, {**GREEDY, "max_new_tokens": 2}, draft_len=1, drafts=[[1]])])
    n = 2000
    out = Reference(FLASHINFER).run_scenario(replicate(spec, "a", range(n))).requests
    acc = [out[f"a#{i}"].steps[0].accepted for i in range(n)]
    first = [out[f"a#{i}"].steps[0].tokens[0] for i in range(n)]
    assert all((t == 1) == (a == 1) for a, t in zip(acc, first))
    assert all(out[f"a#{i}"].error is None for i in range(n))
    assert abs(sum(acc) / n - 0.5) < 4 * math.sqrt(0.25 / n)


class _Recorder(ReferenceSession):
    """A session whose ``verify_chain`` records its arguments and verifies greedily on the one-hot rows."""

    def __init__(self, profile):
        super().__init__(profile)
        self.calls = []

    def verify_chain(self, draft_probs, draft_ids, target_probs, seed, offset):
        self.calls.append((draft_probs.clone(), draft_ids.tolist(), target_probs.shape, seed, offset))
        out, n = [], 0
        for i, d in enumerate(draft_ids.tolist()):
            if int(torch.argmax(target_probs[i])) != d:
                break
            out.append(d)
            n += 1
        out.append(int(torch.argmax(target_probs[n])))
        return out, n


def test_hook_gets_one_hot_q_for_greedy_literal_drafts():
    # Step 0 drafts [2, 0] (V = 5): q rows one-hot(2), one-hot(0); p rows 0..2; seed 9, first offset 0.
    rec = _Recorder(FLASHINFER)
    r = _one({**GREEDY, "seed": 9, "max_new_tokens": 3}, [[2, 0]], 2, model=G_TABLE, profile=FLASHINFER,
             session=rec)
    assert _steps(r) == [([2, 0, 3], 2, 0)]
    (q, ids, shape, seed, offset), = rec.calls
    assert ids == [2, 0] and tuple(shape) == (3, 5) and (seed, offset) == (9, 0)
    assert q.tolist() == [[0, 0, 1, 0, 0], [1, 0, 0, 0, 0]]


# -- item 6: padded drafts -------------------------------------------------------------------------

def test_examined_drafts_stop_at_the_first_pad():
    assert examined_drafts([2, -1, 9]) == [2]
    assert examined_drafts([-1, 3, -1]) == []
    assert examined_drafts([1, 2]) == [1, 2]
    assert examined_drafts([-2, -1]) == [-2]      # another negative id stays, for the vocabulary check
    assert examined_drafts([]) == []


# V = 5, argmax pos0 2, pos1 4 (= V - 1, what row[-1] would read), pos2 1.
PAD_TABLE = TableModel([[0, 0, 3, 0, 0], [0, 0, 0, 0, 3], [0, 3, 0, 0, 0]])


@pytest.mark.parametrize("profile,offsets", [(TRTLLM, [[], []]), (FLASHINFER, [[0, 1, 2, 3], [4, 5, 6, 7]])])
def test_padded_greedy_drafts(profile, offsets):
    # Step 0 [2, -1, 9]: 2 = argmax pos0 accepted; the pad at 1 emits argmax pos1 = 4; 9 is never read.
    # accepted 1, rewind 3 - 1 = 2. Step 1 [-1, -1, -1]: nothing examined, emits argmax pos2 = 1, rewind 3.
    # Under flashinfer the step still takes the declared K + 1 = 4 offsets.
    r = _one({**GREEDY, "seed": 5, "max_new_tokens": 3}, [[2, -1, 9], [-1, -1, -1]], 3, model=PAD_TABLE,
             profile=profile, max_steps=4)
    assert r.error is None
    assert _steps(r) == [([2, 4], 1, 2), ([1], 0, 3)]
    assert [s.drafts for s in r.steps] == [[2], []]
    assert [s.offsets for s in r.steps] == offsets
    assert (r.tokens, r.finish_reason, r.finish_step) == ([2, 4, 1], "length", 1)


S_TABLE = TableModel([[2, 0, 0, 0, 0], [NEG, NEG, NEG, NEG, 0], [NEG, NEG, 0, NEG, NEG]])
UNIFORM_DRAFT = TableModel([[0, 0, 0, 0, 0]])


def test_padded_sampling_drafts():
    # pos0: p(0) = e^2 / (e^2 + 4) = 0.6488 >= q(0) = 0.2: min(1, p/q) = 1, accepted on every seed. The pad at 1:
    # row 1's bonus-rule draw from p1 = point mass on 4 -> 4 (an implementation reading p[-1] = p[4] = 1 would
    # "accept" the pad instead). 7, outside [0, 5), follows the pad: never read. Step 1: all pads, p2 = point
    # mass on 2. Offsets: 4 rows a step (declared K = 3, plus one).
    for seed in (7, 8, 9):
        r = _one({"prompt": [1], "temperature": 1.0, "seed": seed, "max_new_tokens": 3}, [[0, -1, 7], [-1, -1, -1]],
                 3, model=S_TABLE, draft_model=UNIFORM_DRAFT, max_steps=4)
        assert r.error is None
        assert _steps(r) == [([0, 4], 1, 2), ([2], 0, 3)]
        assert [s.offsets for s in r.steps] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert r.tokens == [0, 4, 2] and r.finish_reason == "length"


def test_padded_drafts_through_the_hook_never_carry_a_pad():
    # The hook gets the examined drafts: [0] with p rows 0..1 at offset 0, then K = 0 (all pads) at offset 4.
    rec = _Recorder(FLASHINFER)
    r = _one({"prompt": [1], "temperature": 1.0, "seed": 7, "max_new_tokens": 3}, [[0, -1, 7], [-1, -1, -1]], 3,
             model=S_TABLE, draft_model=UNIFORM_DRAFT, profile=FLASHINFER, max_steps=4, session=rec)
    assert [(c[1], tuple(c[2]), c[4]) for c in rec.calls] == [([0], (2, 5), 0), ([], (1, 5), 4)]
    assert _steps(r) == [([0, 4], 1, 2), ([2], 0, 3)]


@pytest.mark.parametrize("drafts,error", [([[-2, 0]], "invalid_draft"), ([[2, -1, -2]], None),
                                          ([[5, -1]], "invalid_draft"), ([[2, -1, 5]], None)])
def test_other_negative_ids_are_invalid_before_the_pad_only(drafts, error):
    # -2 or 5 (V = 5) before the first pad: invalid_draft; after it: never read.
    r = _one({**GREEDY, "max_new_tokens": 3}, drafts, 3, model=PAD_TABLE)
    assert r.error == error
    if error is None:
        assert _steps(r) == [([2, 4], 1, 2)]


# -- item 3b: one rule for a greedy row with no usable logit ---------------------------------------

def _pair(logits, profile):
    model = TableModel([logits])
    spec = ScenarioSpec(model, [RequestSpec("plain", 0, {**GREEDY, "max_new_tokens": 1}),
                                RequestSpec("spec", 1, {**GREEDY, "max_new_tokens": 1}, draft_len=1, drafts=[[3]])],
                        max_steps=1)
    out = Reference(profile).run_scenario(spec).requests
    return out["plain"], out["spec"]


@pytest.mark.parametrize("logits,want", [([NAN] * 4, 0), ([NEG] * 4, 0), ([NEG, NAN, 2.0, 1.0], 1)])
@pytest.mark.parametrize("profile", [HF, VLLM])
def test_degenerate_greedy_row_argmax_on_both_paths(logits, want, profile):
    # greedy_degenerate 'argmax': torch.argmax's answer, the first NaN (id 0; id 1 for [-inf, nan, 2, 1]), or
    # id 0 for all -inf. Verification: t0 is that token, draft 3 differs, rejected: emits it, accepted 0, rewind 1.
    plain, spec = _pair(logits, profile)
    assert (plain.error, plain.tokens) == (None, [want])
    assert (spec.error, spec.tokens) == (None, [want])
    assert _steps(spec) == [([want], 0, 1)]


@pytest.mark.parametrize("logits,error", [([NAN] * 4, "nan_logits"), ([NEG] * 4, "no_valid_token")])
@pytest.mark.parametrize("profile", [TRTLLM, FLASHINFER])
def test_degenerate_greedy_row_error_on_both_paths(logits, error, profile):
    # greedy_degenerate 'error' (and flashinfer's top_k = 1 sampling rows): the same error at step 0 on both paths.
    plain, spec = _pair(logits, profile)
    assert (plain.error, plain.error_step) == (error, 0)
    assert (spec.error, spec.error_step) == (error, 0)
