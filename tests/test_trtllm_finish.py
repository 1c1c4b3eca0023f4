"""TensorRT-LLM's finish reasons through its FinishReasonsHandler (impls/trtllm/finish.py), hand-checked.

The device shim and the stand-in helper run everywhere; the handler needs a checkout holding
finish_reasons.py (``SAMPCHECK_TRTLLM_SRC``; golden/engines/README.md says how one is assembled).
"""

import os
from pathlib import Path

import pytest
import torch

from impls.base import Row
from impls.trtllm import loader

SRC = os.environ.get(loader.ENV_VAR)


def _finish_module():
    if not SRC or not Path(SRC).is_dir():
        pytest.skip(f"no TensorRT-LLM source checkout: {loader.ENV_VAR} is unset or missing")
    eng = loader.load(SRC)
    if not (eng.root / loader.SAMPLER_DIR / "finish_reasons.py").is_file():
        pytest.skip(f"the checkout {SRC} has no finish_reasons.py (an older one)")
    # there but not loaded is a failure, never a skip
    assert eng.finish_reasons is not None, eng.optional_missing.get("finish_reasons.py")
    return eng.finish_reasons


def test_cuda_on_cpu_places_cuda_arguments_on_the_cpu():
    with loader.cuda_on_cpu():
        a = torch.empty(2, device="cuda", dtype=torch.int32)
        b = torch.arange(1, 4, device="cuda")
        c = b.to("cuda", non_blocking=True)
        d = b.to(device="cuda")
        e = torch.zeros(1, device=torch.device("cuda", 0))
    assert [t.device.type for t in (a, b, c, d, e)] == ["cpu"] * 5
    assert b.tolist() == [1, 2, 3] and a.dtype == torch.int32


def test_multi_arange_stand_in_follows_its_definition():
    # torch.cat([arange(0, 2), arange(3, 5)]) and with steps [1, 2]: arange(3, 8, 2) = 3, 5, 7
    f = loader._torch_multi_arange
    assert f(torch.tensor([2, 5]), starts=torch.tensor([0, 3]), output_length=4).tolist() == [0, 1, 3, 4]
    assert f(torch.tensor([2, 8]), starts=torch.tensor([0, 3]), steps=torch.tensor([1, 2])).tolist() == [0, 1, 3, 5, 7]
    # FinishReasonsHandler's window index with max_tokens 1, word length 3: [0, 1, 2]
    assert f(torch.tensor([3]), starts=torch.tensor([0]), output_length=3).tolist() == [0, 1, 2]


def _row(slot, **kw):
    kw.setdefault("prompt", [9])
    kw.setdefault("generated", [])
    kw.setdefault("end_id", 2)
    return Row(torch.zeros(6), slot=slot, **kw)


def test_one_step_reasons_and_their_order():
    from impls.trtllm.finish import EngineFinish
    f = EngineFinish(_finish_module())
    rows = [
        _row(0, max_new_tokens=1),                                      # EOS at the length limit: END_ID wins
        _row(1, max_new_tokens=2, generated=[4]),                       # 2nd of 2 tokens: LENGTH
        _row(2, max_new_tokens=2, generated=[4], stop_words=[[4, 3]]),  # stop word at the limit: LENGTH wins
        _row(3, prompt=[7, 4], stop_words=[[4, 3]]),                    # the word straddles the prompt: STOP_WORDS
        _row(4, ignore_eos=True),                                       # EOS ignored: NOT_FINISHED
        _row(5, max_seq_len=3, generated=[1]),                          # 1 + 2 tokens = max_seq_len: LENGTH
    ]
    assert f.reasons(rows, [2, 5, 3, 3, 2, 5]) == ["end_id", "length", "length", "stop_words", "none", "length"]


def test_stop_word_completed_across_steps_and_failed_rows_skipped():
    from impls.trtllm.finish import EngineFinish
    f = EngineFinish(_finish_module())
    word = [[4, 1, 3]]
    # one request over three steps: the handler's past-token window shifts one token per step
    assert f.reasons([_row(0, stop_words=word)], [4]) == ["none"]
    assert f.reasons([_row(0, stop_words=word, generated=[4])], [1]) == ["none"]
    assert f.reasons([_row(0, stop_words=word, generated=[4, 1]), _row(3)], [3, None]) == ["stop_words", None]
    # the same slot with another history is a new request: admitted with its own window
    assert f.reasons([_row(0, stop_words=word, generated=[1, 4])], [3]) == ["none"]


def test_window_is_zero_padded_in_front():
    # finding trtllm-stop-word-window-zero-padded: [0, 5, 4, 1, 3] matches the 4-token history [5, 4, 1, 3]
    from impls.trtllm.finish import EngineFinish
    f = EngineFinish(_finish_module())
    rows = [_row(s, prompt=[5], generated=[4, 1], stop_words=[w])
            for s, w in enumerate(([0, 5, 4, 1, 3], [9, 5, 4, 1, 3], [0, 0, 4, 1, 3]))]
    assert f.reasons(rows, [3, 3, 3]) == ["stop_words", "none", "none"]
