"""Host entry points of the fused sampler (tokens; probabilities; both from one filtering).

The kernel is :func:`impls.fused.kernel.fused_sample_kernel`. These wrappers
allocate the outputs and the per-row workspace (``KMAX`` int64 per row,
independent of the vocabulary) and launch one program per row.
"""

from __future__ import annotations

from typing import Optional

import torch

from .kernel import PATHS, STATUS_KINDS, fused_sample_kernel

__all__ = ["fused_sample", "DEFAULTS", "INTERPRETER"]

#: Tuning constants: block of logits per loop step, histogram bins, histogram
#: range in units of (x - max) / T, workspace entries per row. Results do not
#: depend on them (only the path a row takes does).
DEFAULTS = {"block": 2048, "nb": 4096, "r": 32.0, "kmax": 2048, "num_warps": 8, "margin": 1}
#: Under Triton's interpreter (CPU) every program runs in NumPy: small blocks,
#: bins and workspace keep it fast, and send more rows down the boundary and
#: slow paths, which is what a CPU test wants to exercise.
INTERPRETER = {"block": 128, "nb": 128, "r": 32.0, "kmax": 128, "num_warps": 4, "margin": 2}


def _check(t: torch.Tensor, name: str, B: int, device) -> torch.Tensor:
    if t.shape != (B,):
        raise ValueError(f"{name} must have shape ({B},), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, logits on {device}")
    return t.contiguous()


def fused_sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 min_p: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor, want_probs: bool = False,
                 block: Optional[int] = None, nb: Optional[int] = None, r: Optional[float] = None,
                 kmax: Optional[int] = None, num_warps: Optional[int] = None):
    """Sample one token per row with min-p, top-k, top-p, temperature and the canonical draw.

    Parameters
    ----------
    logits : torch.Tensor
        ``(batch, vocab)`` float32, bfloat16 or float16 (upcast to float32
        inside the kernel); rows contiguous in the last dimension.
    temperature, top_p, min_p : torch.Tensor
        ``(batch,)`` float32. ``temperature == 0``, ``top_p == 0`` or
        ``min_p == 1`` make the row greedy; ``top_p >= 1`` and ``min_p <= 0``
        are neutral (SEMANTICS §1.1).
    top_k : torch.Tensor
        ``(batch,)`` int32/int64; 1 is greedy; 0 or ``>= vocab`` is neutral.
    seed, offset : torch.Tensor
        ``(batch,)`` int64: each row's Philox key (the signed view of its
        64-bit seed) and offset (DESIGN.md decision 1).
    want_probs : bool
        Also return the distribution sampled from (same filtering as the
        draw): ``(batch, vocab)`` float32, zeros outside the kept set.

    Returns
    -------
    tokens : torch.Tensor
        ``(batch,)`` int64; -1 for a rejected row.
    status : torch.Tensor
        ``(batch,)`` int32 outcome codes (:data:`impls.fused.kernel.STATUS_KINDS`).
    path : torch.Tensor
        ``(batch,)`` int32 path codes (:data:`impls.fused.kernel.PATHS`).
    probs : torch.Tensor or None

    Raises
    ------
    ValueError
        Shapes, dtypes or devices that do not match.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be (batch, vocab), got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"logits dtype {logits.dtype} not supported (float32, bfloat16, float16)")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    B, V = logits.shape
    dev = logits.device
    temperature = _check(temperature.to(torch.float32), "temperature", B, dev)
    top_p = _check(top_p.to(torch.float32), "top_p", B, dev)
    min_p = _check(min_p.to(torch.float32), "min_p", B, dev)
    top_k = _check(top_k.to(torch.int64), "top_k", B, dev)
    seed = _check(seed.to(torch.int64), "seed", B, dev)
    offset = _check(offset.to(torch.int64), "offset", B, dev)
    cfg = dict(INTERPRETER if logits.device.type == "cpu" else DEFAULTS)
    for name, v in (("block", block), ("nb", nb), ("r", r), ("kmax", kmax), ("num_warps", num_warps)):
        if v is not None:
            cfg[name] = v
    tokens = torch.full((B,), -2, dtype=torch.int64, device=dev)
    status = torch.full((B,), -2, dtype=torch.int32, device=dev)
    path = torch.full((B,), -2, dtype=torch.int32, device=dev)
    probs = torch.full((B, V) if want_probs else (1,), float("nan"), dtype=torch.float32, device=dev)
    ws = torch.empty((B, cfg["kmax"]), dtype=torch.int64, device=dev)
    if B:
        fused_sample_kernel[(B,)](
            logits, logits.stride(0), V, temperature, top_k, top_p, min_p, seed, offset,
            tokens, status, path, probs, ws,
            WANT_PROBS=want_probs, BLOCK=cfg["block"], NB=cfg["nb"], R=cfg["r"], KMAX=cfg["kmax"], MARGIN=cfg["margin"],
            num_warps=cfg["num_warps"],
            # no FMA contraction: the decisions must round like the reference's
            # separate multiply and add (PyTorch)
            enable_fp_fusion=False,
        )
    return tokens, status, path, (probs if want_probs else None)
