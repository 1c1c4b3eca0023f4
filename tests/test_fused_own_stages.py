"""The fused sampler's own admission, seed counters and finish reasons (issue 18: every stage its own code).

Every expected value is worked out by hand from the rules in the modules' docstrings
(SEMANTICS §1.1, §1.6, §1.8, §2, §5); none is computed by the reference.
"""

import math

import numpy as np
import pytest
import torch

from impls.base import Row, RowError
from impls.fused.admit import BEAM, GREEDY, SAMPLING, admit, decayed_top_p, signed_seed
from impls.fused.finish import REASONS, finish_codes, pack_finish
from impls.fused.slots import SlotStreams

NAN = float("nan")
V = 8


def row(**kw):
    return Row(logits=torch.zeros(V), **kw)


@pytest.mark.parametrize("fields, kind", [
    ({"temperature": -0.5}, "invalid_temperature"),
    ({"temperature": NAN}, "invalid_temperature"),
    ({"top_p": 1.5}, "invalid_top_p"),
    ({"top_p": NAN, "top_k": 1}, "invalid_top_p"),          # validation before the greedy spellings
    ({"top_k": -1}, "invalid_top_k"),
    ({"top_k": 2.0}, "invalid_top_k"),
    ({"min_p": 1.5}, "invalid_min_p"),
    ({"repetition_penalty": 0.0}, "invalid_penalty"),
    ({"presence_penalty": NAN}, "invalid_penalty"),
    ({"frequency_penalty": NAN}, "invalid_penalty"),
    ({"top_p_decay": 0.0}, "invalid_top_p_decay"),
    ({"top_p_decay": 0.5, "use_beam_search": True}, "invalid_top_p_decay"),
    ({"top_p_min": 2.0}, "invalid_top_p_min"),
    ({"seed": 1 << 64}, "invalid_seed"),
    ({"seed": -(1 << 63) - 1}, "invalid_seed"),
    ({"max_new_tokens": -1}, "invalid_length"),
    ({"no_repeat_ngram_size": -2}, "invalid_length"),
    ({"end_id": V}, "invalid_end_id"),
    ({"end_id": [3, -2]}, "invalid_end_id"),
    ({"bad_words": [[]]}, "invalid_bad_words"),
    ({"stop_words": [[1, V]]}, "invalid_stop_words"),
    ({"logprob_token_ids": [0, V]}, "invalid_logprobs"),
    ({"token_bitmask": []}, "invalid_token_bitmask"),   # V = 8 needs ceil(8 / 32) = 1 word
    ({"mirostat": 3}, "invalid_sampler_param"),
    ({"min_keep": -1}, "invalid_sampler_param"),
    ({"mirostat_eta": NAN, "min_keep": -1}, "invalid_sampler_param"),
    ({"temperature": -1.0, "seed": 1 << 64}, "invalid_temperature"),   # the first failed check wins
])
def test_admission_rejects_with_the_first_failed_check(fields, kind):
    with pytest.raises(RowError) as e:
        admit(row(**fields))
    assert e.value.kind == kind


def test_non_integer_seed_is_invalid():
    with pytest.raises(RowError) as e:
        signed_seed(1.5)
    assert e.value.kind == "invalid_seed"


@pytest.mark.parametrize("fields, want", [
    ({}, (GREEDY, 0.0, 0, 1.0, 0.0)),                                  # all unset: greedy (rule 3)
    ({"min_p": 0.1}, (SAMPLING, 1.0, 0, 1.0, 0.1)),                    # min_p > 0 alone samples
    ({"top_p_decay": 0.5}, (SAMPLING, 1.0, 0, 1.0, 0.0)),              # an active decay alone samples
    ({"top_p_decay": 1.0}, (GREEDY, 0.0, 0, 1.0, 0.0)),                # a decay of 1 is off
    ({"top_k": 1, "temperature": 0.7}, (GREEDY, 0.0, 0, 1.0, 0.0)),
    ({"top_p": 0.0}, (GREEDY, 0.0, 0, 1.0, 0.0)),
    ({"min_p": 1.0, "temperature": 2.0}, (GREEDY, 0.0, 0, 1.0, 0.0)),
    ({"temperature": 0.0, "top_p": 0.5}, (GREEDY, 0.0, 0, 1.0, 0.0)),
    ({"use_beam_search": True, "temperature": 0.5}, (BEAM, 0.0, 0, 1.0, 0.0)),
    ({"temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0.0}, (SAMPLING, 0.7, 5, 0.9, 0.0)),
    ({"top_k": 0}, (SAMPLING, 1.0, 0, 1.0, 0.0)),                      # set (even to off) makes it sample
    ({"temperature": math.inf}, (SAMPLING, math.inf, 0, 1.0, 0.0)),
])
def test_admission_modes_and_kernel_arguments(fields, want):
    a = admit(row(**fields))
    assert (a.mode, a.temperature, a.top_k, a.top_p, a.min_p) == want


def test_seed_is_the_signed_view_of_its_64_bit_pattern():
    assert admit(row(seed=(1 << 64) - 1)).seed == -1
    assert admit(row(seed=1 << 63)).seed == -(1 << 63)
    assert admit(row(seed=-5)).seed == -5
    assert admit(row()).seed is None


def test_decayed_top_p_in_float32_with_floor_and_reset():
    # float32(0.9) = 0.89999997615814208984375; halved exactly: 0.449999988079071044921875
    r = row(top_p=0.9, top_p_decay=0.5, top_p_min=0.3, top_p_reset_ids=[2], generated=[1, 2, 3])
    assert decayed_top_p(r, 0.9) == 0.449999988079071044921875
    # 0.45 -> max(0.225, 0.3) -> 0.3, the floor as a float32: 0.300000011920928955078125
    r = r.replace(generated=[1, 1, 1])
    assert decayed_top_p(r, 0.9) == 0.300000011920928955078125
    assert admit(r).top_p == 0.300000011920928955078125
    assert decayed_top_p(r.replace(generated=[]), 0.9) == 0.9
    assert float(np.float32(0.3)) == 0.300000011920928955078125


def test_slot_streams_offsets_per_slot_and_the_shared_unseeded_counter():
    s = SlotStreams("cpu")
    base = 1 << 62
    seed, off = s.take([0, 1, 2], ["a", "b", "c"], [7, None, None], [True, True, False])
    assert seed.tolist() == [7, 42, 0] and off.tolist() == [0, base, 0]
    seed, off = s.take([2, 0, 1], ["c", "a", "b"], [None, 7, None], [True, True, True])
    assert seed.tolist() == [42, 7, 42] and off.tolist() == [base + 1, 1, base + 2]   # unseeded: batch order
    # a new request in slot 0 starts at 0; a new seed in slot 1 (same id) is a new occupant too
    seed, off = s.take([0, 1], ["d", "b"], [7, 9], [True, True])
    assert seed.tolist() == [7, 9] and off.tolist() == [0, 0]
    seed, off = s.take([0, 1, 5], ["d", "b", "e"], [7, 9, None], [False, True, True])
    assert seed.tolist() == [0, 9, 42] and off.tolist() == [0, 1, base + 3]          # slot 0 did not draw
    seed, off = s.take([0], ["d"], [7], [True])
    assert off.tolist() == [1]
    assert s.seeds.numel() == 4 and s.unseeded.tolist() == [base + 4]   # one entry per slot seen (0, 1, 2, 5)


def test_rows_that_cannot_draw_take_no_offset_and_nan_rows_not_their_slot():
    s = SlotStreams("cpu")
    base = 1 << 62
    t = lambda *v: torch.tensor(v)
    # row 0 (slot 0, seed 7) holds a NaN: it neither takes slot 0 nor draws; row 1 (+inf or no finite logit)
    # takes slot 1 but draws nothing; row 2, unseeded, takes the counter's first value
    seed, off = s.take([0, 1, 2], ["a", "b", "c"], [7, None, None], [True, True, True],
                       observed=t(False, True, True), drawable=t(False, False, True))
    assert seed.tolist() == [0, 0, 42] and off.tolist() == [0, 0, base]
    assert s.holders.tolist() == [-1, 1, 2]
    seed, off = s.take([0, 1], ["a", "b"], [7, None], [True, True])
    assert seed.tolist() == [7, 42] and off.tolist() == [0, base + 1]


def test_slot_numbers_are_entries_not_table_sizes():
    s = SlotStreams("cpu")
    seed, off = s.take([1 << 45, 3], ["a", "b"], [5, 6], [True, True])
    assert off.tolist() == [0, 0] and s.seeds.tolist() == [5, 6] and s.offsets.tolist() == [1, 1]


def test_slot_streams_reject_repeated_or_negative_slots():
    with pytest.raises(ValueError, match="distinct"):
        SlotStreams("cpu").take([1, 1], ["a", "b"], [None, None], [True, True])
    with pytest.raises(ValueError, match=">= 0"):
        SlotStreams("cpu").take([-1], ["a"], [None], [True])


def test_finish_reasons_and_their_precedence():
    rows = [
        row(end_id=5),                                               # EOS
        row(end_id=5, ignore_eos=True),                              # EOS ignored: nothing else holds
        row(end_id=5, generated=[1, 1], max_new_tokens=3),           # EOS at the length limit: end_id first
        row(generated=[1, 1], max_new_tokens=3),                     # the third new token: length
        row(prompt=[1, 2, 3], generated=[4], max_seq_len=5),         # 3 + 1 + 1 = 5: length
        row(prompt=[1, 2, 3], generated=[4], max_seq_len=6),         # 5 < 6: none
        row(prompt=[1, 2], stop_words=[[2, 5]]),                     # a stop word across the prompt boundary
        row(prompt=[2], stop_words=[[1, 2, 5], [4]]),                # longer than the history: no match
        row(end_id=[6, 5], stop_words=[[5]], max_new_tokens=1),      # an EOS set: end_id before length
        row(end_id=-1, generated=[1], stop_words=[[1, 5]]),          # -1 names no id; the word ends it
    ]
    tokens = torch.tensor([5, 5, 5, 2, 0, 0, 5, 5, 5, 5])
    got = [REASONS[int(c)] for c in finish_codes(tokens, pack_finish(rows, "cpu"))]
    assert got == ["end_id", "none", "end_id", "length", "length", "none", "stop_words", "none", "end_id",
                   "stop_words"]


def test_a_rejected_rows_minus_one_matches_no_end_id():
    rows = [row(end_id=-1), row(end_id=[-1, 3])]
    assert finish_codes(torch.tensor([-1, -1]), pack_finish(rows, "cpu")).tolist() == [0, 0]


def test_a_short_bitmask_is_its_rows_error_in_the_step_and_in_the_reference():
    # 40 tokens need ceil(40 / 32) = 2 words; one word is the row's error (the case schema refuses it; a row given
    # through the API once raised ValueError from the fused step and IndexError from the reference, for the batch)
    from impls.fused import FusedSession
    from impls.reference.sampler import ReferenceSession
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        pytest.importorskip("triton")
    rows = [Row(logits=torch.zeros(40), temperature=0.0, token_bitmask=[-1], slot=0),
            Row(logits=torch.arange(40.0), temperature=0.0, token_bitmask=[-1, 0], slot=1)]
    for out in (FusedSession(dev).step(rows), ReferenceSession().step(rows)):
        assert out[0].error == "invalid_token_bitmask"
        assert out[1].error is None and out[1].token == 31   # ids 32..39 banned by the zero word

