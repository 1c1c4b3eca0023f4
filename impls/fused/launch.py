"""Launching the fused kernels with less host work per call.

``kernel[grid](*args, **meta)`` (Triton's ``JITFunction.run``) binds the
arguments, builds the specialisation key, looks the compiled kernel up and
checks the kernel's globals at every call. The fused sampler makes five such
calls, so at small batches (where the GPU work is a few µs per launch) the
sampler's latency is this host work. :func:`launch` keeps, per kernel and per
*specialisation* of its arguments, the compiled kernel that the first call
returned, and launches it directly afterwards: the same binary, the same
arguments, none of the per-call lookups.

The specialisation key here is at least as fine as Triton's (tensor dtype and
16-byte alignment; for integers: equal to 1, divisible by 16, fits in 32 bits;
the values of the ``constexpr`` and launch options), so a cached binary is
only reused where Triton would have chosen the same one.

The direct launch uses ``CompiledKernel.run`` with the argument list of
``JITFunction.run`` (grid, stream, function, packed metadata, launch metadata,
enter/exit hooks, then every parameter in signature order), as in Triton 3.6
and 3.9 (``triton/runtime/jit.py``, ``JITFunction.run``). If that call is
refused (another Triton), the launcher falls back to ``kernel[grid]`` for the
rest of the process and says why in :data:`FALLBACK`. Under
``TRITON_INTERPRET=1`` (the CPU tests) kernels always go through
``kernel[grid]``.
"""

from __future__ import annotations

import inspect
from typing import Optional

import torch

__all__ = ["launch", "MODES", "FALLBACK", "single_launches"]

#: Launcher modes: ``"cached"`` (the default) and ``"jit"`` (always ``kernel[grid]``).
MODES = ("cached", "jit")
#: Why the cached launcher is off in this process (None while it works).
FALLBACK: Optional[str] = None

_CACHE: dict = {}
_TAILS: dict = {}


def _spec(a):
    """The part of an argument that chooses Triton's binary."""
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0)
    if isinstance(a, bool):
        return ("b", a)
    if isinstance(a, int):
        return ("i", a == 1, a % 16 == 0, -(1 << 31) <= a < (1 << 31))
    if isinstance(a, float):
        return ("f",)
    return (type(a).__name__, a)


def _tail(kernel, nargs: int, meta: dict) -> tuple:
    """The values of the parameters after the positional ones, in signature order (constexprs)."""
    key = (kernel, nargs, tuple(sorted(meta.items())))
    t = _TAILS.get(key)
    if t is None:
        params = list(inspect.signature(kernel.fn).parameters.values())[nargs:]
        vals = []
        for p in params:
            if p.name in meta:
                vals.append(meta[p.name])
            elif p.default is not inspect.Parameter.empty:
                vals.append(p.default)
            else:
                raise TypeError(f"{kernel.fn.__name__}: no value for parameter {p.name}")
        t = _TAILS[key] = tuple(vals)
    return t


def launch(kernel, grid: tuple, args: tuple, meta: dict, options: dict, mode: str = "cached") -> None:
    """Launch ``kernel`` on ``grid`` with positional ``args`` and constexpr values ``meta``.

    Parameters
    ----------
    kernel : triton.runtime.jit.JITFunction
    grid : tuple of int
        One to three program counts.
    args : tuple
        The kernel's leading (non-constexpr) parameters, tensors and scalars.
    meta : dict
        The ``tl.constexpr`` parameters by name (every one without a default).
    options : dict
        Compile/launch options (``num_warps``, ``enable_fp_fusion``).
    mode : str
        ``"cached"`` or ``"jit"`` (:data:`MODES`).

    Raises
    ------
    ValueError
        For an unknown ``mode``.
    """
    global FALLBACK
    if mode not in MODES:
        raise ValueError(f"unknown launcher mode {mode!r}; known: {', '.join(MODES)}")
    dev = args[0].device if isinstance(args[0], torch.Tensor) else None
    if mode == "jit" or FALLBACK is not None or dev is None or dev.type != "cuda":
        kernel[grid](*args, **meta, **options)
        return
    # meta/options in the caller's order: a caller that changes the order only misses the cache once
    key = (kernel, dev.index, len(grid), tuple(_spec(a) for a in args), tuple(meta.items()), tuple(options.items()))
    compiled = _CACHE.get(key)
    if compiled is None:
        compiled = kernel[grid](*args, **meta, **options)
        if compiled is not None and hasattr(compiled, "run"):
            _CACHE[key] = compiled
        return
    from triton import knobs

    g = tuple(grid) + (1,) * (3 - len(grid))
    stream = torch.cuda.current_stream(dev).cuda_stream
    full = args + _tail(kernel, len(args), meta)
    enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    lm = compiled.launch_metadata(g, stream, *full) if enter is not None else None
    try:
        compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata, lm, enter, exit_, *full)
    except TypeError as e:  # another Triton's launcher signature: nothing was launched
        FALLBACK = f"cached launch refused by this Triton ({type(e).__name__}: {e}); using kernel[grid]"
        kernel[grid](*args, **meta, **options)


def single_launches(x, T, K, P, M, seed, off, cfg: dict, mode: str) -> list:
    """``(name, callable)`` for each launch of one fused call, for host-cost measurements.

    Parameters
    ----------
    x : torch.Tensor
        ``(batch, vocab)`` logits on a CUDA device.
    T, K, P, M, seed, off : torch.Tensor
        ``(batch,)`` parameters as :func:`impls.fused.ops.fused_sample` takes them (already converted).
    cfg : dict
        Tuning constants (:data:`impls.fused.ops.DEFAULTS`).
    mode : str
        One of :data:`MODES`.

    Returns
    -------
    list of (str, callable)
        Each callable re-launches one kernel on the same zeroed buffers (the
        results are not meaningful, the host cost is).
    """
    from .kernel import launch_args
    from .ops import allocate

    B, V = x.shape
    a = allocate(B, V, x.device, cfg, empty=torch.zeros)  # defined content: the launches re-read stale parts
    out = []
    for name, kernel, grid, args, meta, options in launch_args(x, T, K, P, M, seed, off, a["tokens"], a["status"],
                                                               a["path"], a["probs"], a["wsi"], a["wsf"], a["ws64"],
                                                               a["S"], a["CH"], False, cfg):
        out.append((name, lambda k=kernel, g=grid, ar=args, m=meta, o=options: launch(k, g, ar, m, o, mode)))
    return out
