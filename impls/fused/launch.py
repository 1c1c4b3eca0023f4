"""Launching the fused kernels with little host work per call: one launch plan per call shape.

``kernel[grid](*args, **meta)`` (Triton's ``JITFunction.run``) binds the
arguments, builds the specialisation key, looks the compiled kernel up and
checks the kernel's globals at every call (in Triton 3.6, ~35–90 µs a launch on
the H200's host, ``benchmarks/README.md``). The fused sampler makes five such
launches, so at small batches, where the GPU work is a few µs per launch, the
sampler's latency is this host work.

:func:`run_call` keeps a :class:`Plan` per *call shape*: the key is what
chooses Triton's binaries and the launches' arguments (device, logits dtype,
batch, vocabulary, row stride, whether probabilities are asked for, the tuning
constants, and the 16-byte alignment of every caller tensor). The first call of
a shape launches through ``kernel[grid]`` (compiling where needed) and keeps
the compiled kernels, grids and constant arguments it used; later calls read
the stream once and launch the same binaries directly with the new tensors.
The fused sampler's own outputs and workspaces are fresh allocations from
PyTorch's caching allocator (aligned to 512 bytes, and the views
:func:`impls.fused.workspace.allocate` carves start at 16-byte multiples), so their
alignment is fixed by the key.

The direct launch is ``CompiledKernel.run`` with the argument list of
``JITFunction.run`` (grid, stream, function, packed metadata, launch metadata,
enter/exit hooks, then every parameter in signature order, constexprs
included), as in Triton 3.6 and 3.9 (``triton/runtime/jit.py``,
``JITFunction.run``), with three savings per launch (measured in
``benchmarks/README.md``, "Host time and one launch for a large all-greedy batch"):

* tensors go in as their addresses (``int``), read once per call: for a tensor
  argument Triton's C launcher calls its ``data_ptr`` method and asks the CUDA
  driver whether the address is device memory (``cuPointerGetAttribute``,
  ``getPointer`` in ``triton/backends/nvidia/driver.py``), some 8 to 13 times a
  launch here; the call's tensors are already checked to be on the logits' CUDA
  device (:func:`impls.fused.ops.check_call`);
* the launch metadata is built only when a launch hook is set (otherwise
  ``CompiledKernel.launch_metadata`` returns None);
* where the launcher is Triton 3.6's ``CudaLauncher`` and the kernel needs no
  global or profiling scratch memory, its C ``launch`` is called directly with
  the arguments its Python ``__call__`` would add (cooperative-grid and PDL
  flags, no scratch).

If a Triton refuses that call (``TypeError``), the
launches go through ``kernel[grid]`` for the rest of the process, and
:data:`FALLBACK` says why. Under ``TRITON_INTERPRET=1`` (the CPU tests), and
on tensors that are not on a CUDA device, kernels always go through
``kernel[grid]``. Like ``kernel[grid]``, a plan launches on the current stream
of the logits' device. Plans are kept for the life of the process, one per call
shape seen (small: they share Triton's compiled kernels).
"""

from __future__ import annotations

import contextlib
import inspect
import operator
from typing import Optional

import numpy as np
import torch
from triton import knobs

from .kernel import INTERPRETED, SLOTS, launch_specs
from .options import BOOL_OR_INT

__all__ = ["run_call", "Plan", "Bound", "bind", "LaunchRefused", "MODES", "FALLBACK", "plan_key", "single_launches",
           "device_cfg", "quiet_interpreter"]

#: Launcher modes: ``"cached"`` (a plan per call shape, the default) and ``"jit"`` (always ``kernel[grid]``).
MODES = ("cached", "jit")
#: Why the plans are off in this process (None while they work).
FALLBACK: Optional[str] = None

_PLANS: dict = {}
_PDL_OK: dict = {}
_INDEX = {name: i for i, name in enumerate(SLOTS)}
_NSLOTS = len(SLOTS)


def _tail(kernel, nargs: int, meta: dict) -> tuple:
    """The values of ``kernel``'s parameters after the first ``nargs``, in signature order (its constexprs).

    Raises
    ------
    TypeError
        A parameter with neither a value in ``meta`` nor a default.
    """
    vals = []
    for p in list(inspect.signature(kernel.fn).parameters.values())[nargs:]:
        if p.name in meta:
            vals.append(meta[p.name])
        elif p.default is not inspect.Parameter.empty:
            vals.append(p.default)
        else:
            raise TypeError(f"{kernel.fn.__name__}: no value for parameter {p.name}")
    return tuple(vals)


def device_cfg(cfg: dict, device) -> dict:
    """``cfg`` for launches on ``device``: ``pdl`` off on a GPU older than Hopper (compute capability below 9.0:
    ``griddepcontrol`` exists from sm_90 on, PTX ISA); else ``cfg`` itself.

    Parameters
    ----------
    cfg : dict
        Tuning constants (:data:`impls.fused.ops.DEFAULTS`).
    device : torch.device
        The logits' device (only a CUDA device is asked for its capability, once per device index).

    Returns
    -------
    dict
        ``cfg`` itself, or a copy with ``pdl`` False; nothing raises beyond what ``torch.cuda`` raises for a
        device index that does not exist.
    """
    if not cfg.get("pdl", False) or device.type != "cuda":
        return cfg
    index = device.index if device.index is not None else torch.cuda.current_device()
    ok = _PDL_OK.get(index)
    if ok is None:
        ok = _PDL_OK[index] = torch.cuda.get_device_capability(index) >= (9, 0)
    return cfg if ok else dict(cfg, pdl=False)


def _stream(index: int) -> int:
    """The raw handle of the current CUDA stream of device ``index`` (what Triton's launcher takes)."""
    try:
        return torch._C._cuda_getCurrentRawStream(index)
    except AttributeError:  # a torch without the private accessor
        return torch.cuda.current_stream(index).cuda_stream


def _resolve(args: tuple, vals: tuple) -> tuple:
    return tuple(vals[_INDEX[a]] if isinstance(a, str) else a for a in args)


class Plan:
    """The launches of one call shape, with their compiled kernels, grids and constant arguments resolved.

    Parameters
    ----------
    specs : list
        :func:`impls.fused.kernel.launch_specs` of the shape (tensors as :data:`SLOTS` names).
    compiled : list
        For each spec, the ``CompiledKernel`` that ``kernel[grid]`` returned for it.

    Notes
    -----
    Each step keeps an ``operator.itemgetter`` that picks the launch's whole argument list
    (positional parameters, then the constexpr tail) from the call's tensors followed by the
    plan's constants, so a launch costs one C-level tuple build and Triton's C launcher.
    """

    __slots__ = ("specs", "steps", "consts")

    def __init__(self, specs: list, compiled: list):
        consts: list = []
        steps = []
        for (name, kernel, grid, args, meta, _options), ck in zip(specs, compiled):
            pos = []
            for a in args + _tail(kernel, len(args), meta):
                if isinstance(a, str):
                    pos.append(_INDEX[a])
                else:
                    pos.append(_NSLOTS + len(consts))
                    consts.append(a)
            g = tuple(grid) + (1,) * (3 - len(grid))
            run, pre = _launcher(ck)
            steps.append((ck, run, g, ck.function, pre + (ck.packed_metadata,), operator.itemgetter(*pos), name))
        self.specs = specs
        self.steps = steps
        self.consts = tuple(consts)

    def run(self, vals: tuple, stream: int, first: int = 0, last: Optional[int] = None) -> None:
        """Launch steps ``first`` to ``last`` (all by default) on ``stream`` with the call's tensors ``vals``.

        Parameters
        ----------
        vals : tuple of torch.Tensor
            The call's tensors in :data:`SLOTS` order.
        stream : int
            Raw CUDA stream handle.

        Raises
        ------
        LaunchRefused
            When this Triton's launcher refuses the argument list (:func:`run_call` falls back).
        """
        self.run_addresses(tuple(v.data_ptr() for v in vals), stream, first, last)

    def run_addresses(self, ptrs: tuple, stream: int, first: int = 0, last: Optional[int] = None) -> None:
        """:meth:`run` with the call's tensors given as their addresses (``int``, :data:`SLOTS` order).

        Raises
        ------
        LaunchRefused
            As :meth:`run`.
        """
        enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        ext = ptrs + self.consts   # addresses: see the module's docstring
        for i, (ck, run, g, function, pre, get, _name) in enumerate(self.steps[first:last], first):
            full = get(ext)
            # the launch metadata exists only for a launch hook (CompiledKernel.launch_metadata, as JITFunction.run)
            lm = None if enter is None else ck.launch_metadata(g, stream, *full)
            try:
                run(g[0], g[1], g[2], stream, function, *pre, lm, enter, exit_, *full)
            except TypeError as e:
                raise LaunchRefused(i, e) from e


def _launcher(ck) -> tuple:
    """``(callable, leading arguments)`` launching compiled kernel ``ck`` with ``JITFunction.run``'s arguments.

    Triton 3.6's ``CudaLauncher.__call__`` (``triton/backends/nvidia/driver.py``) allocates the global and
    profiling scratch memory a kernel asks for, then calls its C ``launch`` with the cooperative-grid and PDL
    flags and the two scratch pointers inserted after the function handle. For a kernel that asks for neither,
    that C function is returned with those four values (the wrapper's Python frame and closure saved); any other
    launcher, ``ck.run`` itself with none.
    """
    run = ck.run
    try:
        if (type(run).__name__ == "CudaLauncher" and run.global_scratch_size == 0 and run.profile_scratch_size == 0
                and callable(run.launch)):
            return run.launch, (int(run.launch_cooperative_grid), int(run.launch_pdl), None, None)
    except AttributeError:   # another Triton's launcher: its own __call__
        pass
    return run, ()


class LaunchRefused(TypeError):
    """A Triton launcher refused a plan's argument list at step ``step`` (nothing of that step ran).

    Triton's C launcher parses its arguments before it launches, so the refused step and those
    after it have not run; :func:`run_call` launches them through ``kernel[grid]``.
    """

    def __init__(self, step: int, cause: TypeError):
        super().__init__(f"step {step}: {type(cause).__name__}: {cause}")
        self.step = step


def plan_key(vals: tuple, S: int, CH: int, want_probs: bool, cfg: dict, greedy: bool = False,
             ptrs: Optional[tuple] = None) -> tuple:
    """The key of a call's :class:`Plan`: everything that chooses its binaries and arguments.

    Parameters
    ----------
    vals : tuple of torch.Tensor
        The call's tensors in :data:`SLOTS` order (logits first; the seven caller tensors before the outputs).
    ptrs : tuple of int, optional
        Their addresses, when the caller has read them already (:func:`run_call` launches with them).

    Returns
    -------
    tuple
        Device index, logits dtype, shape and row stride, ``S``, ``CH``, ``want_probs``, ``greedy``, the
        tuning constants (and the types of :data:`impls.fused.options.BOOL_OR_INT`'s), the parameters' dtypes
        (``top_p`` may be float32 or float64), and whether each caller tensor's address is a multiple of 16
        (Triton specialises on it).
    """
    x = vals[0]
    return (x.device.index, x.dtype, x.shape, x.stride(0), S, CH, want_probs, greedy, tuple(cfg.items()),
            tuple(type(cfg.get(name)) for name in BOOL_OR_INT),
            tuple(t.dtype for t in vals[1:7]),
            tuple(p & 15 == 0 for p in (ptrs[:7] if ptrs is not None else (t.data_ptr() for t in vals[:7]))))


def quiet_interpreter():
    """A context for launches: under Triton's interpreter, NumPy's floating-point warnings off (the kernels compute
    with inf and NaN on purpose, e.g. the arithmetic of a row that a NaN temperature has them reject; compiled,
    that arithmetic warns nothing); compiled, a context that does nothing."""
    return np.errstate(all="ignore") if INTERPRETED else contextlib.nullcontext()


def _jit(specs: list, vals: tuple, first: int = 0) -> list:
    """Launch ``specs[first:]`` through ``kernel[grid]``; the compiled kernels it returned."""
    with quiet_interpreter():
        return [kernel[grid](*_resolve(args, vals), **meta, **options)
                for _name, kernel, grid, args, meta, options in specs[first:]]


def run_call(vals: tuple, S: int, CH: int, want_probs: bool, cfg: dict, mode: str = "cached",
             greedy: bool = False) -> None:
    """Launch one fused call: the plan of its shape where there is one, else through ``kernel[grid]``.

    Parameters
    ----------
    vals : tuple of torch.Tensor
        The call's tensors in :data:`SLOTS` order, allocated by :func:`impls.fused.ops.fused_sample`.
    S, CH : int
        Programs per row and logits per program.
    want_probs : bool
        Also launch the probabilities kernel.
    cfg : dict
        Tuning constants.
    mode : str
        One of :data:`MODES`.
    greedy : bool
        The all-greedy launches (:func:`impls.fused.kernel.launch_specs`).

    Raises
    ------
    ValueError
        An unknown ``mode``.
    """
    global FALLBACK
    if mode not in MODES:
        raise ValueError(f"unknown launcher mode {mode!r}; known: {', '.join(MODES)}")
    x = vals[0]
    B, V = x.shape
    cfg = device_cfg(cfg, x.device)
    if mode == "jit" or FALLBACK is not None or x.device.type != "cuda":
        _jit(launch_specs(B, V, x.stride(0), S, CH, want_probs, cfg, greedy), vals)
        return
    ptrs = tuple(v.data_ptr() for v in vals)   # read once: the key's alignment and the launches
    key = plan_key(vals, S, CH, want_probs, cfg, greedy, ptrs)
    plan = _PLANS.get(key)
    if plan is None:
        specs = launch_specs(B, V, x.stride(0), S, CH, want_probs, cfg, greedy)
        compiled = _jit(specs, vals)
        if all(ck is not None and hasattr(ck, "run") for ck in compiled):
            _PLANS[key] = Plan(specs, compiled)
        return
    try:
        plan.run_addresses(ptrs, _stream(key[0]))
    except LaunchRefused as e:
        FALLBACK = f"direct launch refused by this Triton ({e}); using kernel[grid]"
        _jit(plan.specs, vals, e.step)


class Bound:
    """A call shape's :class:`Plan` bound to one call's tensors but the logits: a call costs the logits' address.

    Made by :func:`bind` after a first :func:`run_call` of the shape; :meth:`run` launches the plan with new
    logits (the same shape, dtype, device, row stride and 16-byte alignment, which the caller checks) and the
    bound parameters, outputs and workspaces, whose addresses were read once. It keeps those tensors alive.
    """

    __slots__ = ("plan", "rest", "ptrs", "index")

    def __init__(self, plan: Plan, vals: tuple):
        self.plan, self.rest = plan, vals[1:]   # not the first call's logits: a caller's large tensor
        self.ptrs = tuple(v.data_ptr() for v in self.rest)
        self.index = vals[0].device.index

    def run(self, logits, address: Optional[int] = None) -> None:
        """Launch the bound call on ``logits`` (on the current stream of its device); ``address``: theirs if known."""
        global FALLBACK
        if FALLBACK is not None:   # a launch refused since (here or by another plan): kernel[grid] from now on
            _jit(self.plan.specs, (logits,) + self.rest)
            return
        try:
            self.plan.run_addresses((logits.data_ptr() if address is None else address,) + self.ptrs,
                                    _stream(self.index))
        except LaunchRefused as e:
            FALLBACK = f"direct launch refused by this Triton ({e}); using kernel[grid]"
            _jit(self.plan.specs, (logits,) + self.rest, e.step)


def bind(vals: tuple, S: int, CH: int, want_probs: bool, cfg: dict, greedy: bool = False) -> Optional[Bound]:
    """The :class:`Bound` launches of ``vals`` (:data:`SLOTS` order) once :func:`run_call` has made their plan.

    Returns
    -------
    Bound or None
        None where calls go through ``kernel[grid]`` (the interpreter, a tensor not on CUDA, :data:`FALLBACK`
        set) or no plan of this shape exists yet.
    """
    x = vals[0]
    if FALLBACK is not None or x.device.type != "cuda":
        return None
    plan = _PLANS.get(plan_key(vals, S, CH, want_probs, device_cfg(cfg, x.device), greedy))
    return None if plan is None else Bound(plan, vals)


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
        One of :data:`MODES`: ``"jit"`` times ``kernel[grid]``, ``"cached"`` one step of the call's :class:`Plan`.

    Returns
    -------
    list of (str, callable)
        Each callable re-launches one kernel on the same zeroed buffers (the
        results are not meaningful, the host cost is).
    """
    from .workspace import allocate, call_tensors

    B, V = x.shape
    cfg = device_cfg(cfg, x.device)
    a = allocate(B, V, x.device, cfg, empty=torch.zeros)  # defined content: the launches re-read stale parts
    vals = call_tensors(x, (T, K, P, M, seed, off), a)
    specs = launch_specs(B, V, x.stride(0), a["S"], a["CH"], False, cfg)
    plan = Plan(specs, _jit(specs, vals))
    out = []
    for i, (name, kernel, grid, args, meta, options) in enumerate(specs):
        if mode == "jit":
            out.append((name, lambda k=kernel, g=grid, ar=_resolve(args, vals), m=meta, o=options: k[g](*ar, **m, **o)))
        else:
            out.append((name, lambda i=i: plan.run(vals, _stream(x.device.index), i, i + 1)))
    return out
