"""Test session set-up.

Triton reads ``TRITON_INTERPRET`` when a kernel is decorated, so it must be
set before any test module imports the fused kernel: without a CUDA device the
kernel runs under Triton's interpreter on the CPU.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def sglang_impl():
    """SGLang's adapter, one per test session, shared by tests/test_sglang.py and tests/test_sglang_scenarios.py;
    skipped with the reason where SGLang is not installed or not available on this device."""
    pytest.importorskip("sglang", reason="SGLang is not installed (tox -e sglang)")
    from impls.sglang import SglangImpl
    im = SglangImpl()
    why = im.available("cpu")
    if why:
        pytest.skip(why)
    return im


def pytest_collection_modifyitems(config, items):
    """Skip ``@pytest.mark.gpu`` tests where no CUDA device is visible (with the reason)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none is visible); run 'tox -e gpu' on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
