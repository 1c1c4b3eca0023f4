"""The fused sampler bound to a batch: parameters and buffers checked once, a call costs its launches.

An engine keeps a batch's sampling parameters in persistent device tensors and writes new values into
them when requests join or leave (vLLM's ``InputBatch.__init__`` allocates ``temperature``, ``top_p``,
``top_k`` ... once per engine on the device, with pinned CPU copies it fills per request,
``vllm/v1/worker/gpu_input_batch.py`` at vLLM commit 000794d). :class:`FusedSampler` takes such tensors and,
at its first call, the call shape: it checks them (:func:`impls.fused.ops.check_call`), allocates the
outputs and workspaces, and from the second call launches the shape's plan with the addresses it read at
the first (:class:`impls.fused.launch.Bound`). Per call the host checks the logits' shape, dtype,
device, row stride and alignment, reads their address and the current stream, and launches: on an H100's
host, 2026-12-06, one launch cost 5.5 to 7.2 µs that way against 10.8 µs with tensor arguments, and a general
call 38.6 µs at 256 x 128256 and 58.6 at 256 x 32000 against 87.3 and 100.5 for
:func:`impls.fused.ops.fused_sample` with kept buffers in the same run (benchmarks/README.md, "Host time and
one launch for a large all-greedy batch"). The tokens are those of :func:`~impls.fused.ops.fused_sample` with
the same tensors (the same kernels and launches).
"""

from __future__ import annotations

import torch

from .launch import MODES, bind, run_call
from .ops import DEFAULTS, INTERPRETER, allocate, apply_tuning, check_call
from .workspace import call_tensors

__all__ = ["FusedSampler"]

_NAMES = ("temperature", "top_k", "top_p", "min_p", "seed", "offset")


class FusedSampler:
    """:func:`impls.fused.ops.fused_sample` bound to one batch's parameter tensors and, at its first call, to the
    logits' shape.

    Parameters
    ----------
    temperature, top_k, top_p, min_p, seed, offset : torch.Tensor
        ``(batch,)`` per-row parameters as :func:`~impls.fused.ops.fused_sample` takes them, already of the
        kernel's dtypes (float32; ``top_k``, ``seed``, ``offset`` int64; ``top_p`` float32 or float64) and
        contiguous, on the logits' device: every call reads their current values on the device, so a caller
        updates them in place.
    want_probs : bool
        Also return the distribution sampled from.
    greedy : bool
        The caller's all-greedy hint (:func:`~impls.fused.ops.fused_sample`).
    launcher : str
        ``"cached"`` (default) or ``"jit"`` (every launch through ``kernel[grid]``, nothing bound).
    **tuning
        Tuning options (:data:`impls.fused.ops.DEFAULTS`); the tokens do not depend on them. ``None``: the
        default (as :func:`impls.fused.ops.fused_sample` takes it).

    Raises
    ------
    TypeError
        An unknown tuning option; ``want_probs`` or ``greedy`` not a bool (the logits given here, as to
        :func:`impls.fused.ops.fused_sample`, land in ``want_probs``: the message says so).
    ValueError
        An unknown ``launcher``, a tuning value out of range.

    Notes
    -----
    The first call checks the parameters against the logits (:func:`~impls.fused.ops.check_call`, and that
    none needs converting: a converted copy would not see the caller's later writes), allocates the outputs and
    workspaces, and binds the logits' shape, dtype, device, row stride and (on CUDA) 16-byte alignment; later
    calls need logits of the same (logits whose rows are not contiguous are copied first, every call, as
    :func:`~impls.fused.ops.fused_sample` does). Only the parameters' values may change after the first call:
    their shapes, dtypes and devices are not checked again. Each call overwrites the outputs of the last one
    (``tokens``, ``status``, ``path``, ``probs``: the same tensors every call, as ``buffers=`` of
    :func:`~impls.fused.ops.fused_sample`).
    Capturable in a CUDA graph after a first call, like :func:`~impls.fused.ops.fused_sample`.
    """

    def __init__(self, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
                 seed: torch.Tensor, offset: torch.Tensor, want_probs: bool = False, greedy: bool = False,
                 launcher: str = "cached", **tuning):
        if launcher not in MODES:
            raise ValueError(f"unknown launcher mode {launcher!r}; known: {', '.join(MODES)}")
        for name, v in (("want_probs", want_probs), ("greedy", greedy)):
            if not isinstance(v, bool):
                hint = (": FusedSampler takes the six parameter tensors (temperature ... offset), the logits go to "
                        "each call" if isinstance(v, torch.Tensor) else "")
                raise TypeError(f"FusedSampler {name} must be True or False, got {type(v).__name__}{hint}")
        self.tuning = {k: v for k, v in tuning.items() if v is not None}
        # names and ranges checked now, against the GPU's defaults or the interpreter's (kbr=256 is valid with the
        # interpreter's kmax=128, not the GPU's 2,048): the device's set is applied, and checked, at the first call
        try:
            apply_tuning(DEFAULTS, self.tuning)
        except ValueError as gpu_error:
            try:
                apply_tuning(INTERPRETER, self.tuning)
            except ValueError:
                raise gpu_error from None
        self.given = (temperature, top_k, top_p, min_p, seed, offset)
        self.want_probs, self.greedy, self.launcher = bool(want_probs), bool(greedy), launcher
        self.buffers = None   # allocated at the first call
        self._bound = None    # None: not tried yet; False: every call through run_call

    def _bind(self, logits: torch.Tensor) -> None:
        logits, params = check_call(logits, *self.given)
        for name, t, p in zip(_NAMES, self.given, params):
            if p is not t:
                want = "torch.float32 or torch.float64" if name == "top_p" else str(p.dtype)
                raise ValueError(f"{name}: bound parameters must already be contiguous {want} tensors (got "
                                 f"{t.dtype}{'' if t.is_contiguous() else ', not contiguous'}): a converted copy "
                                 "would not see the caller's later writes")
        B, V = logits.shape
        dev = logits.device
        cfg = INTERPRETER if dev.type == "cpu" else DEFAULTS
        self.cfg = apply_tuning(cfg, self.tuning) if self.tuning else cfg
        self.params = params
        self._shape, self._dtype, self._device, self._stride = logits.shape, logits.dtype, dev, logits.stride()
        # Triton specialises CUDA kernels on 16-byte alignment; the interpreter (CPU) on nothing
        self._aligned = (logits.data_ptr() & 15 == 0) if dev.type == "cuda" else None
        self.buffers = allocate(B, V, dev, self.cfg, self.want_probs)

    def __call__(self, logits: torch.Tensor) -> tuple:
        """Sample one token per row of ``logits``.

        Returns
        -------
        tuple
            ``(tokens, status, path, probs)`` as :func:`~impls.fused.ops.fused_sample` returns them (the
            bound outputs; ``probs`` None unless ``want_probs``).

        Raises
        ------
        TypeError
            ``logits`` is not a tensor; at the first call, what :func:`~impls.fused.ops.check_call` raises.
        ValueError
            At the first call, what :func:`~impls.fused.ops.check_call` raises, or a parameter that would need
            converting; later, logits of another shape, dtype, device or row stride than the first call's, or
            whose address's 16-byte alignment differs (the compiled kernels are specialised on it): bind a new
            sampler for them.
        """
        if not isinstance(logits, torch.Tensor):
            raise TypeError(f"logits must be a (batch, vocab) tensor, got {type(logits).__name__}")
        if logits.dim() == 2 and logits.stride(-1) != 1:
            logits = logits.contiguous()   # as fused_sample: the kernels read rows contiguous in the vocabulary
        if self.buffers is None:
            self._bind(logits)
        address = logits.data_ptr()
        if (logits.shape != self._shape or logits.dtype != self._dtype or logits.device != self._device
                or logits.stride() != self._stride
                or (self._aligned is not None and (address & 15 == 0) != self._aligned)):
            al = lambda a: "" if self._aligned is None else (", 16-byte aligned" if a else ", not 16-byte aligned")
            raise ValueError(
                f"this FusedSampler is bound to {tuple(self._shape)} {self._dtype} logits on {self._device} with "
                f"strides {self._stride}{al(self._aligned)}; got {tuple(logits.shape)} {logits.dtype} on "
                f"{logits.device} with strides {logits.stride()}{al(address & 15 == 0)}: bind a new FusedSampler "
                "for them (or call fused_sample)")
        a = self.buffers
        if not self._shape[0]:   # no rows: nothing to launch (as fused_sample)
            return a["tokens"], a["status"], a["path"], (a["probs"] if self.want_probs else None)
        if self._bound:
            self._bound.run(logits, address)
        else:
            vals = call_tensors(logits, self.params, a)
            run_call(vals, a["S"], a["CH"], self.want_probs, self.cfg, self.launcher, self.greedy)
            if self._bound is None and self.launcher == "cached":
                self._bound = bind(vals, a["S"], a["CH"], self.want_probs, self.cfg, self.greedy) or False
        return a["tokens"], a["status"], a["path"], (a["probs"] if self.want_probs else None)
