"""Implementations under test, behind one protocol (:mod:`impls.base`).

:func:`get_impl` builds one by name; adapters import their engine lazily so
that a missing engine is a ``skip`` with a reason, never an import error.
"""

from __future__ import annotations

__all__ = ["get_impl", "IMPL_NAMES", "TRTLLM_SRC_ENV"]

#: Environment variable naming the TensorRT-LLM source checkout of impl ``trtllm`` (``--trtllm-src`` sets it).
TRTLLM_SRC_ENV = "SAMPCHECK_TRTLLM_SRC"

IMPL_NAMES = ("reference", "reference-hf", "transformers", "transformers-beam", "reference-vllm", "vllm", "fused", "flashinfer",
              "flashinfer-joint", "trtllm")


def get_impl(name: str):
    """Return the implementation called ``name``.

    ``reference`` runs the default profile; ``reference-<profile>`` runs the
    reference under another profile (an oracle for that engine).

    Raises
    ------
    KeyError
        For an unknown name; the message lists the known ones.
    """
    from .profiles import PROFILES
    if name == "reference":
        from .reference import Reference
        return Reference()
    if name.startswith("reference-") and name[len("reference-"):] in PROFILES:
        from .reference import Reference
        return Reference(PROFILES[name[len("reference-"):]], name=name)
    if name == "transformers":
        from .transformers import TransformersImpl
        return TransformersImpl()
    if name == "transformers-beam":
        from .transformers.beam import TransformersBeamImpl
        return TransformersBeamImpl()
    if name == "vllm":
        from .vllm import VllmImpl
        return VllmImpl()
    if name == "fused":
        from .fused import FusedImpl
        return FusedImpl()
    if name == "trtllm":
        from .trtllm import TrtllmImpl
        return TrtllmImpl()  # the checkout comes from $SAMPCHECK_TRTLLM_SRC (sampcheck --trtllm-src sets it)
    if name in ("flashinfer", "flashinfer-joint"):
        from .flashinfer import FlashInferImpl
        return FlashInferImpl("top_k_first" if name == "flashinfer" else "joint")
    others = [f"reference-{p}" for p in PROFILES if f"reference-{p}" not in IMPL_NAMES and p != "trtllm"]
    raise KeyError(f"unknown implementation {name!r}; known: {', '.join(list(IMPL_NAMES) + others)}")
