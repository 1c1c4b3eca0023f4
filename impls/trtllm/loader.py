"""Load TensorRT-LLM's pure-PyTorch sampler functions from a source checkout.

TensorRT-LLM's wheels cannot be installed here, but much of its PyTorch
sampler (``tensorrt_llm/_torch/pyexecutor/sampler/``) is plain PyTorch. This
module imports the files the adapter needs **by file path** from a checkout
the user points to (``--trtllm-src PATH`` or ``SAMPCHECK_TRTLLM_SRC``), with
the smallest stand-ins (stub modules) for what those files import and this
machine cannot provide. Nothing of TensorRT-LLM is vendored in this project.

Files loaded (paths under ``tensorrt_llm/_torch/pyexecutor/sampler/``):

* ``ops/vanilla.py`` — ``occurrence_penalized_logits`` (the penalty formula),
  ``Fusions.update_occurrence_workspace`` and
  ``Fusions.apply_batched_occurrence_penalties`` (the penalty op around it),
  ``top_k_top_p_sampling_batch`` (the vanilla min-p / top-k / top-p op),
  ``greedy_search_sampling_batch`` and ``Fusions.top_p_decay_update``;
* ``token_ban.py`` — ``SynchronousTokenBanHandler`` (min-length end-id ban,
  bad words, no-repeat-ngram);
* ``seed_manager.py`` — ``_SeedManager`` (per-slot Philox seed and offset);
* optionally ``beam_search.py`` — ``beam_search_sampling_batch`` (one step of
  the regular beam search: temperature, log-softmax, frozen finished beams,
  ``beam_candidate_topk`` with length penalty and diversity, re-parenting
  bookkeeping) where the checkout still has it (@095443e5), and
  ``beam_search_sampling_batch_cba`` / ``_prepare_beam_history_cba`` /
  ``finalize_beam`` (the candidate-beams-array step and the final ranking).
  A checkout without it loads; beam search is then ``n/a``;
* optionally ``finish_reasons.py`` — ``FinishReasonsHandler`` (end id,
  length and stop words of each new token, with its per-slot stop-word and
  past-token buffers), run on the CPU under :func:`cuda_on_cpu`;
* optionally ``sampler_strategy.py`` (loaded only together with
  ``beam_search.py``) — ``sample`` and the ``BeamSearch`` strategy tuple: the
  dispatch that picks the beam step for a request (@029e223d: the
  candidate-beams array for every ``early_stopping`` mode).

Which beam path the adapter drives is read from what the checkout has
(:attr:`Engine.beam_path`), never from a version number.

Stand-ins (installed in ``sys.modules``; each is the least the files need):

* ``tensorrt_llm._utils`` with ``prefer_pinned() -> False`` (no pinned host
  memory on a CPU-only machine) — imported by ``token_ban.py``;
* ``tensorrt_llm.logger`` with a ``logger.warning_once`` that records the
  message (read back by :func:`Engine.warnings`) — imported by
  ``seed_manager.py``;
* ``<pkg>.llm_request`` with an empty ``LlmRequest`` class (the bound C++
  request type; used only in annotations and as a weak-dict key type) —
  imported by ``token_ban.py`` and ``seed_manager.py``;
* ``<pkg>.sampler.sampler_common`` with ``RequestSeeds(seed, offset)`` and
  ``request_random_seed(request) -> request.py_random_seed`` — imported by
  ``seed_manager.py``;
* ``<pkg>.sampler.ops.logprobs_triton`` (Triton logprob kernels; never
  called here, its functions raise) — imported by ``ops/vanilla.py``;
* for ``beam_search.py``: ``tensorrt_llm._utils.nvtx_range`` (a no-op range),
  ``tensorrt_llm.bindings.executor.FinishReason`` (the C++ enum's values,
  ``cpp/include/tensorrt_llm/executor/types.h``: NOT_FINISHED 0, END_ID 1,
  STOP_WORDS 2, LENGTH 3, TIMED_OUT 4, CANCELLED 5), ``llm_request.LlmRequestState``
  (an enum of names only: the loaded code compares a request's state with
  ``GENERATION_COMPLETE``), ``sampler.logprobs`` and the CUDA-only helpers of
  ``sampler_common`` (raise if called), ``sampler_common._get_beam_width_in``
  (the real one's rule: 1 in the context phase, else the request's
  ``get_beam_width_by_iter(for_next_iteration=False)``),
  ``sampler.ops.flashinfer.radix_topk_op`` (FlashInfer's radix top-k, which
  ``beam_search.py`` uses only for rows wider than 10000 tokens: raises, so
  such a beam step fails with that message; @50aec1cb guards it with
  ``tensorrt_llm._torch.flashinfer_utils.IS_FLASHINFER_AVAILABLE``, stood in
  as ``False``), ``tensorrt_llm.executor.result.Logprob`` (a named tuple
  ``(logprob, rank)``) and ``sampler.sampler_features._SideStreamCopier``
  (an empty class; both only typed or used off the step);
* for ``finish_reasons.py``: ``sampler_common.int_tensor`` (the real one's
  body, sampler_common.py@06ec703b: ``torch.empty(shape, dtype=torch.int,
  device=device)``, device ``"cuda"`` by default) and
  ``tensorrt_llm._torch.utils.torch_multi_arange`` (the concatenated
  ``arange(start, end)`` ranges its docstring defines; the real one,
  ``_torch/utils.py``, imports the bindings). The file allocates its buffers
  with ``device="cuda"`` written in: :func:`cuda_on_cpu` runs it with those
  placed on the CPU (the arithmetic is the same torch ops);
* for ``sampler_strategy.py``: the FlashInfer sampling-op wrappers of
  ``sampler.ops.flashinfer`` and the request helpers of ``sampler_common``
  (raise if called: the beam dispatch never calls them),
  ``tensorrt_llm.sampling_params`` (``SamplingParams``, whose methods raise,
  and ``LogprobMode``), ``tensorrt_llm._utils.maybe_pin_memory`` (identity),
  ``sampler.top_p_decay.TopPDecayMetadata`` (an empty class). The file's
  absolute imports of ``tensorrt_llm._torch.pyexecutor.sampler.{beam_search,
  ops.vanilla, ops.flashinfer}`` are answered, while it is executed only, by
  this checkout's modules (:func:`_absolute_aliases`).

The relative imports of the loaded files resolve inside a private package
(``_sampcheck_trtllm_<n>.tensorrt_llm...``), one per loaded checkout, so two
checkouts can be loaded in one process (the tests do); the absolute
``tensorrt_llm._utils`` and ``tensorrt_llm.logger`` stand-ins are shared and
installed only where no real ``tensorrt_llm`` is importable.

``torch.compile``-decorated ops run their **eager** Python bodies here
(``_torchdynamo_orig_callable``): same arithmetic, no Inductor kernel; the
compiled kernels are not what is verified.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import importlib.util
import itertools
import os
import re
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

__all__ = ["CheckoutError", "Engine", "SAMPLER_DIR", "REQUIRED", "OPTIONAL", "ENV_VAR", "find_checkout", "load",
           "eager", "FinishReason", "RecordingLogger", "stand_in", "raising_stub", "sha256_of", "exec_source",
           "BEAM_STEP_OPS", "LlmRequestState", "cuda_on_cpu"]

#: Environment variable naming the checkout (``sampcheck --trtllm-src`` sets it: :attr:`impls.trtllm.TrtllmImpl.cli_options`).
ENV_VAR = "SAMPCHECK_TRTLLM_SRC"
#: The sampler package inside a checkout.
SAMPLER_DIR = "tensorrt_llm/_torch/pyexecutor/sampler"
#: Files loaded, relative to :data:`SAMPLER_DIR`, with the names each must define.
REQUIRED = {
    "ops/vanilla.py": ("occurrence_penalized_logits", "top_k_top_p_sampling_batch", "greedy_search_sampling_batch",
                       "Fusions.update_occurrence_workspace", "Fusions.apply_batched_occurrence_penalties",
                       "Fusions._apply_occurrence_penalties_impl", "Fusions._top_p_decay_update_impl"),
    "token_ban.py": ("SynchronousTokenBanHandler",),
    "seed_manager.py": ("_SeedManager",),
}
#: Files loaded when present (a checkout without them still loads; the features they carry are n/a).
OPTIONAL = {
    "beam_search.py": ("beam_candidate_topk", "BeamSearchMetadata", "BEAM_SEARCH_PAD_TOKEN"),
    "sampler_strategy.py": ("sample", "BeamSearch"),
    "finish_reasons.py": ("FinishReasonsHandler",),
}
#: ``beam_search.py`` must define at least one of these beam-step ops: the regular (frozen-slots) step, removed
#: by @50aec1cb, and the candidate-beams-array step with what the adapter calls around it.
BEAM_STEP_OPS = {
    "regular": ("beam_search_sampling_batch",),
    "candidate_beams": ("beam_search_sampling_batch_cba", "BeamSearchEarlyStop", "CBAState", "CBAGroupHost",
                        "_prepare_beam_history_cba", "finalize_beam"),
}
#: The commit whose layout this adapter was written against (ops/vanilla.py).
LAYOUT_COMMIT = "770709ac1c693877b2aa257ee004f366c11c3333"

_counter = itertools.count()
_cache: dict = {}


class CheckoutError(Exception):
    """A path that is not a usable TensorRT-LLM source checkout; the message says why."""


@dataclass
class Engine:
    """The loaded modules of one checkout and what is known about them.

    Attributes
    ----------
    root : Path
    vanilla, token_ban, seed_manager : module
        ``ops/vanilla.py``, ``token_ban.py`` and ``seed_manager.py`` as loaded.
    beam_search : module or None
        ``beam_search.py`` when the checkout has it and it loads.
    sampler_strategy : module or None
        ``sampler_strategy.py`` when the checkout has it and it loads (only
        tried when ``beam_search.py`` loaded: it imports it).
    finish_reasons : module or None
        ``finish_reasons.py`` when the checkout has it and it loads.
    optional_missing : dict
        Optional file -> why it is not loaded.
    files : dict
        Relative path (from the checkout root) -> ``{"sha256", "commit",
        "recorded_sha256"}`` (commit and recorded hash from ``COMMIT.txt`` or
        ``git rev-parse HEAD``, None when unknown).
    version : str or None
        ``__version__`` of ``tensorrt_llm/version.py`` when the checkout has it.
    """

    root: Path
    vanilla: types.ModuleType
    token_ban: types.ModuleType
    seed_manager: types.ModuleType
    beam_search: Optional[types.ModuleType] = None
    sampler_strategy: Optional[types.ModuleType] = None
    finish_reasons: Optional[types.ModuleType] = None
    optional_missing: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    version: Optional[str] = None

    @property
    def beam_path(self) -> Optional[str]:
        """The beam step the adapter drives, read from what the checkout defines.

        Returns
        -------
        str or None
            ``"regular"``: ``beam_search.py`` still has the regular step
            ``beam_search_sampling_batch`` (@095443e5), which TensorRT-LLM
            ran for ``early_stopping = True`` (finished beams frozen in their
            slots); requests with another mode are ``n/a``.
            ``"candidate_beams"``: the regular step is gone and
            ``sampler_strategy.py`` is loaded, whose ``sample`` sends every
            mode to ``beam_search_sampling_batch_cba`` (@50aec1cb with
            sampler_strategy.py@029e223d: "Every early_stopping mode goes
            through the candidate-beams-array path"); the adapter hands each
            step to ``sample``. None: no beam step can be driven
            (:meth:`beam_unavailable` says why).
        """
        bs = self.beam_search
        if bs is None:
            return None
        if all(hasattr(bs, n) for n in BEAM_STEP_OPS["regular"]):
            return "regular"
        if self.sampler_strategy is not None and all(hasattr(bs, n) for n in BEAM_STEP_OPS["candidate_beams"]):
            return "candidate_beams"
        return None

    def beam_unavailable(self) -> Optional[str]:
        """Why :attr:`beam_path` is None (a sentence naming the missing file or names), or None."""
        if self.beam_path is not None:
            return None
        if self.beam_search is None:
            return self.optional_missing.get("beam_search.py", f"{SAMPLER_DIR}/beam_search.py is not loaded")
        if self.sampler_strategy is None:
            return (f"{SAMPLER_DIR}/beam_search.py has no regular beam step (beam_search_sampling_batch) and the "
                    f"dispatch that selects its candidate-beams-array step is not loaded: "
                    + self.optional_missing.get("sampler_strategy.py", "sampler_strategy.py"))
        missing = [n for n in BEAM_STEP_OPS["candidate_beams"] if not hasattr(self.beam_search, n)]
        return (f"{SAMPLER_DIR}/beam_search.py has no regular beam step and lacks "
                + ", ".join(missing) + " of the candidate-beams-array step")

    def warnings(self) -> list:
        """Messages the loaded code logged through ``logger.warning_once`` (the stand-in keeps them)."""
        return list(_LOGGER.messages)

    def commits(self) -> list:
        """The distinct commits the loaded files were read at (unknown ones left out), in file order."""
        return list(dict.fromkeys(f["commit"] for f in self.files.values() if f.get("commit")))


def find_checkout(path: Optional[str] = None) -> Optional[Path]:
    """The checkout to use: ``path``, else ``$SAMPCHECK_TRTLLM_SRC``, else None."""
    p = path or os.environ.get(ENV_VAR) or None
    return Path(p).expanduser() if p else None


def eager(fn):
    """The Python function under a ``torch.compile`` wrapper (the function itself when not wrapped)."""
    return getattr(fn, "_torchdynamo_orig_callable", fn)


# -- loading engine files by path with stand-ins (generic: also used by impls.vllm_gpu.loader) ----------
class RecordingLogger:
    """A logger stand-in that records messages and never prints.

    Serves ``tensorrt_llm.logger.logger`` here and vLLM's ``init_logger(name)``
    in :mod:`impls.vllm_gpu.loader`. ``*_once`` methods record a message once
    per ``key`` (default: the message); ``%``-style arguments are applied.

    Attributes
    ----------
    messages : list of str
    """

    def __init__(self):
        self.messages: list = []
        self._keys: set = set()

    @staticmethod
    def _text(msg, args) -> str:
        try:
            return str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            return " ".join([str(msg), *map(str, args)])

    def _once(self, msg, *args, key=None, **kw):
        k = key if key is not None else msg
        if k not in self._keys:
            self._keys.add(k)
            self.messages.append(self._text(msg, args))

    def _record(self, msg, *args, **kw):
        self.messages.append(self._text(msg, args))

    warning_once = info_once = debug_once = _once
    warning = info = debug = error = exception = _record


_Logger = RecordingLogger  # the name this module used before the helpers were shared
_LOGGER = RecordingLogger()


class RequestSeeds(NamedTuple):
    """Stand-in for ``sampler_common.RequestSeeds``: per-row seed and offset tensors."""

    seed: object
    offset: object


def _request_random_seed(request):
    # Stand-in for sampler_common.request_random_seed: the fake request carries the
    # seed the adapter resolved (signed 64-bit view, or None).
    return getattr(request, "py_random_seed", None)


def stand_in(name: str, package: bool = False, **attrs) -> types.ModuleType:
    """A stand-in module called ``name`` holding ``attrs`` (a package when ``package``: empty ``__path__``).

    Marked ``__sampcheck_stub__ = True`` so that code (and a reader of
    ``sys.modules``) can tell it from the real module.
    """
    m = types.ModuleType(name)
    if package:
        m.__path__ = []
    m.__dict__.update(attrs)
    m.__dict__.setdefault("__sampcheck_stub__", True)
    return m


_module = stand_in  # the name this module used before the helpers were shared


def _triton_stub(*_a, **_k):
    raise NotImplementedError("logprobs_triton (Triton kernels) is a stand-in under sampcheck; it is not run")


def raising_stub(what: str):
    """A function stand-in for ``what`` (a dotted name) that raises ``NotImplementedError`` when called.

    For names a loaded file imports but the paths sampcheck drives never call:
    a call is a loud error naming the stand-in, never a silent wrong value.
    """
    def f(*_a, **_k):
        raise NotImplementedError(f"{what} is a stand-in under sampcheck; it is not run")
    f.__name__ = what.rsplit(".", 1)[-1]
    return f


_stub = raising_stub


class _NoRange:
    """Stand-in for ``tensorrt_llm._utils.nvtx_range``: a context manager and decorator that does nothing."""

    def __init__(self, *_a, **_k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn


class FinishReason(enum.IntEnum):
    """Stand-in for ``tensorrt_llm.bindings.executor.FinishReason`` (values of the C++ enum)."""

    NOT_FINISHED = 0
    END_ID = 1
    STOP_WORDS = 2
    LENGTH = 3
    TIMED_OUT = 4
    CANCELLED = 5


def _radix_topk_stub(values, k):
    raise NotImplementedError(f"beam_search.py hands rows wider than 10000 tokens ({values.shape[-1]} here) to "
                              "FlashInfer's radix top-k (ops/flashinfer.py radix_topk_op), a CUDA kernel not loaded "
                              "under sampcheck")


class LlmRequestState(enum.Enum):
    """Stand-in for the bound ``LlmRequestState`` enum: the names the loaded beam code compares with.

    Only identity matters (``request.state == LlmRequestState.GENERATION_COMPLETE``
    in ``beam_search.py`` ``_prepare_beam_history_cba``); the values are not
    the C++ ones.
    """

    CONTEXT_INIT = enum.auto()
    GENERATION_IN_PROGRESS = enum.auto()
    GENERATION_COMPLETE = enum.auto()


class Logprob(NamedTuple):
    """Stand-in for ``tensorrt_llm.executor.result.Logprob`` (``beam_search.py``@50aec1cb builds it off the step)."""

    logprob: float
    rank: Optional[int] = None


class LogprobMode(enum.Enum):
    """Stand-in for ``tensorrt_llm.sampling_params.LogprobMode`` (``sampler_strategy.py`` compares with it)."""

    RAW = "raw"
    PROCESSED = "processed"


class _StubClass:
    """Base of stand-in classes whose use would be a wrong value: instantiating one raises."""

    def __init__(self, *_a, **_k):
        raise NotImplementedError(f"{type(self).__name__} is a stand-in under sampcheck; it is not run")


class SamplingParams(_StubClass):
    """Stand-in for ``tensorrt_llm.sampling_params.SamplingParams``: its validation needs the bindings."""

    params_imply_greedy_decoding = staticmethod(raising_stub("SamplingParams.params_imply_greedy_decoding"))
    params_imply_top_p_decay_active = staticmethod(raising_stub("SamplingParams.params_imply_top_p_decay_active"))


def _int_tensor(shape, device="cuda"):
    # Stand-in for sampler_common.int_tensor, with the real one's body (sampler_common.py@06ec703b).
    import torch
    return torch.empty(shape, dtype=torch.int, device=device)


def _torch_multi_arange(ends, *, output_length=None, starts=None, steps=None):
    # Stand-in for tensorrt_llm/_torch/utils.py torch_multi_arange, by its docstring's definition:
    # torch.cat([torch.arange(b, e, d) for b, e, d in zip(starts, ends, steps)]), starts 0 and steps 1 by default.
    import torch
    starts = torch.zeros_like(ends) if starts is None else starts
    steps = torch.ones_like(ends) if steps is None else steps
    parts = [torch.arange(int(b), int(e), int(d), device=ends.device, dtype=ends.dtype)
             for b, e, d in zip(starts.tolist(), ends.tolist(), steps.tolist())]
    return torch.cat(parts) if parts else ends.new_empty(0)


def _is_cuda(dev) -> bool:
    if isinstance(dev, str):
        return dev.split(":")[0] == "cuda"
    return getattr(dev, "type", None) == "cuda"


@contextlib.contextmanager
def cuda_on_cpu():
    """While the block runs, torch calls that name a CUDA device get the CPU instead.

    ``finish_reasons.py`` allocates its buffers with ``device="cuda"``
    written in and moves host tensors with ``.to("cuda")`` /
    ``.to(device="cuda")``; the ops themselves are device-agnostic torch.
    Inside the block a ``device=`` keyword or a positional device argument
    naming CUDA becomes ``"cpu"`` (a ``TorchFunctionMode``: factory
    functions and tensor methods alike); nothing else changes. Nests.
    """
    import torch
    from torch.overrides import TorchFunctionMode

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if _is_cuda(kwargs.get("device")):
                kwargs["device"] = "cpu"
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple("cpu" if _is_cuda(a) else a for a in args)
            return func(*args, **kwargs)

    with _Mode():
        yield


def _get_beam_width_in(request) -> int:
    # Stand-in for sampler_common._get_beam_width_in, with the real one's rule (1 while the request is in its
    # context phase, else its width for the current iteration); the adapter's request answers both.
    return 1 if request.is_context_init_state else request.get_beam_width_by_iter(for_next_iteration=False)


#: Names ``sampler_strategy.py``@029e223d imports from ``ops/flashinfer.py`` (FlashInfer sampling wrappers; the
#: beam dispatch never calls them).
_FLASHINFER_OPS = ("sampling_from_probs_op", "sanitize_top_k", "softmax_op", "top_k_mask_logits_op",
                   "top_k_renorm_probs_op", "top_k_sampling_from_probs_op", "top_k_top_p_sampling_from_logits_op",
                   "top_k_top_p_sampling_from_probs_op", "top_p_renorm_probs_op", "top_p_sampling_from_probs_op")
#: Request helpers ``sampler_strategy.py``@029e223d imports from ``sampler_common.py`` (never called by ``sample``).
_REQUEST_HELPERS = ("_get_max_beam_width", "_request_get_sampling_params", "_request_sampling_params_cachable",
                    "top_p_decay_active")
#: Absolute module names ``sampler_strategy.py`` imports from, relative to :data:`SAMPLER_DIR`'s package.
_ABSOLUTE_SAMPLER = "tensorrt_llm._torch.pyexecutor.sampler"


@contextlib.contextmanager
def _absolute_aliases(base: str):
    """While the block runs, ``tensorrt_llm._torch.pyexecutor.sampler.{beam_search, ops.vanilla, ops.flashinfer}``
    name this checkout's modules under ``base`` (its private package); the previous entries come back after.

    ``sampler_strategy.py`` imports those three by absolute name; binding them at its execution only keeps two
    checkouts loadable in one process.
    """
    names = {f"{_ABSOLUTE_SAMPLER}.{sub}": f"{base}.sampler.{sub}" for sub in ("beam_search", "ops.vanilla",
                                                                                  "ops.flashinfer")}
    saved = {n: sys.modules.get(n) for n in names}
    try:
        for absolute, private in names.items():
            sys.modules[absolute] = sys.modules[private]
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def _install_absolute_stubs() -> None:
    """``tensorrt_llm``, ``tensorrt_llm._utils`` and ``tensorrt_llm.logger``, unless a real package exists."""
    if "tensorrt_llm" not in sys.modules:
        if importlib.util.find_spec("tensorrt_llm") is not None:
            return  # a real installation answers the absolute imports
        sys.modules["tensorrt_llm"] = _module("tensorrt_llm", package=True, __sampcheck_stub__=True)
    if not getattr(sys.modules["tensorrt_llm"], "__sampcheck_stub__", False):
        return
    sys.modules.setdefault("tensorrt_llm._utils", _module("tensorrt_llm._utils", prefer_pinned=lambda: False,
                                                          nvtx_range=_NoRange))
    sys.modules["tensorrt_llm._utils"].__dict__.setdefault("maybe_pin_memory", lambda t: t)
    sys.modules.setdefault("tensorrt_llm.logger", _module("tensorrt_llm.logger", logger=_LOGGER))
    sys.modules.setdefault("tensorrt_llm.bindings", _module("tensorrt_llm.bindings", package=True))
    sys.modules.setdefault("tensorrt_llm.bindings.executor",
                           _module("tensorrt_llm.bindings.executor", FinishReason=FinishReason))
    # beam_search.py@50aec1cb and sampler_strategy.py@029e223d
    sys.modules.setdefault("tensorrt_llm._torch", _module("tensorrt_llm._torch", package=True))
    sys.modules.setdefault("tensorrt_llm._torch.flashinfer_utils",
                           _module("tensorrt_llm._torch.flashinfer_utils", IS_FLASHINFER_AVAILABLE=False))
    sys.modules.setdefault("tensorrt_llm.executor", _module("tensorrt_llm.executor", package=True))
    sys.modules.setdefault("tensorrt_llm.executor.result", _module("tensorrt_llm.executor.result", Logprob=Logprob))
    sys.modules.setdefault("tensorrt_llm.sampling_params",
                           _module("tensorrt_llm.sampling_params", SamplingParams=SamplingParams,
                                   LogprobMode=LogprobMode))


# -- facts about the files ------------------------------------------------------
def sha256_of(p: Path) -> str:
    """Hex SHA-256 of the file at ``p``."""
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


_sha256 = sha256_of


def _recorded(root: Path) -> dict:
    """``COMMIT.txt`` lines ``<path> <commit> [sha256:<hex>]`` -> {path: (commit, sha)}."""
    out = {}
    f = root / "COMMIT.txt"
    if not f.is_file():
        return out
    for line in f.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.startswith("#") and re.fullmatch(r"[0-9a-f]{7,40}", parts[1]):
            sha = parts[2][len("sha256:"):] if len(parts) > 2 and parts[2].startswith("sha256:") else None
            out[parts[0]] = (parts[1], sha)
    return out


def _git_head(root: Path) -> Optional[str]:
    if not (root / ".git").exists():
        return None
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    head = r.stdout.strip()
    return head if r.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", head) else None


def _version(root: Path) -> Optional[str]:
    f = root / "tensorrt_llm" / "version.py"
    if not f.is_file():
        return None
    m = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", f.read_text(encoding="utf-8", errors="replace"))
    return m.group(1) if m else None


# -- loading --------------------------------------------------------------------
def exec_source(name: str, path: Path, rel: str, error=CheckoutError, hint: str = "") -> types.ModuleType:
    """Execute the file at ``path`` as the module ``name``, registered in ``sys.modules`` under that name.

    Parameters
    ----------
    name : str
        The module's name (its relative and absolute imports resolve from it).
    path : Path
        The source file.
    rel : str
        How messages name the file (its path inside the checkout or bundle).
    error : type
        The exception raised on failure (:class:`CheckoutError` here).
    hint : str
        Appended to the message of a missing import (which layout the loader expects).

    Raises
    ------
    error
        ``"loading <rel> failed: it imports '<module>', which sampcheck has no stand-in
        for<hint>"`` for a missing module, ``"loading <rel> failed: <Type>: <message>"``
        for any other exception; the half-made module is removed from ``sys.modules``.
    """
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except ModuleNotFoundError as e:
        del sys.modules[name]
        raise error(f"loading {rel} failed: it imports {e.name!r}, which sampcheck has no stand-in for{hint}") from e
    except Exception as e:
        del sys.modules[name]
        raise error(f"loading {rel} failed: {type(e).__name__}: {e}") from e
    return mod


def _load_file(name: str, path: Path, rel: str) -> types.ModuleType:
    return exec_source(name, path, rel, CheckoutError, f" (this adapter was written against the layout of "
                                                       f"NVIDIA/TensorRT-LLM@{LAYOUT_COMMIT[:8]})")


def _check_names(mod: types.ModuleType, rel: str, names) -> None:
    for dotted in names:
        obj = mod
        for part in dotted.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise CheckoutError(f"{SAMPLER_DIR}/{rel} defines no {dotted} (this adapter was written against the "
                                    f"layout of NVIDIA/TensorRT-LLM@{LAYOUT_COMMIT[:8]})")


def load(root) -> Engine:
    """Load the sampler functions of the checkout at ``root`` (cached per resolved path).

    Raises
    ------
    CheckoutError
        ``root`` does not exist, is not a directory, lacks one of the files of
        :data:`REQUIRED` (the message names it), or a file fails to import or
        lacks a function the adapter calls.
    """
    root = Path(root).expanduser()
    if not root.exists():
        raise CheckoutError(f"{root}: no such directory (the TensorRT-LLM source checkout)")
    if not root.is_dir():
        raise CheckoutError(f"{root}: not a directory (the TensorRT-LLM source checkout)")
    root = root.resolve()
    if root in _cache:
        return _cache[root]
    missing = [rel for rel in REQUIRED if not (root / SAMPLER_DIR / rel).is_file()]
    if missing:
        raise CheckoutError(f"{root} is not a usable TensorRT-LLM source checkout: missing "
                            + ", ".join(f"{SAMPLER_DIR}/{m}" for m in missing)
                            + f" (sampcheck loads {', '.join(REQUIRED)} from {SAMPLER_DIR}/)")
    _install_absolute_stubs()
    pkg = f"_sampcheck_trtllm_{next(_counter)}"
    base = f"{pkg}.tensorrt_llm._torch.pyexecutor"
    for name in (pkg, f"{pkg}.tensorrt_llm", f"{pkg}.tensorrt_llm._torch", base, f"{base}.sampler",
                 f"{base}.sampler.ops"):
        sys.modules[name] = _module(name, package=True)

    class LlmRequest:  # stand-in for the bound C++ request type (annotations, weak-dict keys)
        pass

    sys.modules[f"{base}.llm_request"] = _module(f"{base}.llm_request", LlmRequest=LlmRequest,
                                                 LlmRequestState=LlmRequestState)
    sys.modules[f"{base}.sampler.sampler_common"] = _module(
        f"{base}.sampler.sampler_common", RequestSeeds=RequestSeeds, request_random_seed=_request_random_seed,
        _get_beam_width_in=_get_beam_width_in,
        _unwrap_singleton=_stub("sampler_common._unwrap_singleton"), int_tensor=_int_tensor,
        UtilsSamplingParams=type("UtilsSamplingParams", (_StubClass,), {}),
        **{n: _stub(f"sampler_common.{n}") for n in _REQUEST_HELPERS})
    sys.modules[f"{pkg}.tensorrt_llm._torch.utils"] = _module(f"{pkg}.tensorrt_llm._torch.utils",
                                                             torch_multi_arange=_torch_multi_arange)
    sys.modules[f"{base}.sampler.ops.logprobs_triton"] = _module(
        f"{base}.sampler.ops.logprobs_triton", determine_sampled_rank=_triton_stub, gather_log_softmax=_triton_stub)
    sys.modules[f"{base}.sampler.ops.flashinfer"] = _module(
        f"{base}.sampler.ops.flashinfer", radix_topk_op=_radix_topk_stub,
        **{n: _stub(f"ops.flashinfer.{n}") for n in _FLASHINFER_OPS})
    sys.modules[f"{base}.sampler.sampler_features"] = _module(
        f"{base}.sampler.sampler_features", _SideStreamCopier=type("_SideStreamCopier", (_StubClass,), {}))
    sys.modules[f"{base}.sampler.top_p_decay"] = _module(
        f"{base}.sampler.top_p_decay", TopPDecayMetadata=type("TopPDecayMetadata", (_StubClass,), {}))
    sys.modules[f"{base}.sampler.logprobs"] = _module(
        f"{base}.sampler.logprobs", LogProbsStore=type("LogProbsStore", (), {}),
        convert_logprobs_tensor_to_list=_stub("logprobs.convert_logprobs_tensor_to_list"),
        get_logprobs_from_request=_stub("logprobs.get_logprobs_from_request"))
    mods = {}
    for rel, names in REQUIRED.items():
        modname = f"{base}.sampler." + rel[:-3].replace("/", ".")
        mods[rel] = _load_file(modname, root / SAMPLER_DIR / rel, f"{SAMPLER_DIR}/{rel}")
        _check_names(mods[rel], rel, names)
    optional_missing = {}
    for rel, names in OPTIONAL.items():
        path = root / SAMPLER_DIR / rel
        if not path.is_file():
            optional_missing[rel] = f"{SAMPLER_DIR}/{rel} is not in the checkout"
            continue
        if rel == "sampler_strategy.py" and "beam_search.py" not in mods:
            optional_missing[rel] = (f"{SAMPLER_DIR}/{rel} is not loaded: it imports beam_search.py, which did not "
                                     "load")
            continue
        try:
            # sampler_strategy.py imports its siblings by absolute name: this checkout's modules answer.
            with _absolute_aliases(base) if rel == "sampler_strategy.py" else contextlib.nullcontext():
                mods[rel] = _load_file(f"{base}.sampler." + rel[:-3].replace("/", "."), path,
                                       f"{SAMPLER_DIR}/{rel}")
            _check_names(mods[rel], rel, names)
            if rel == "beam_search.py" and not any(all(hasattr(mods[rel], n) for n in ops)
                                                   for ops in BEAM_STEP_OPS.values()):
                raise CheckoutError(f"{SAMPLER_DIR}/{rel} defines no beam step the adapter can drive (neither "
                                    + " nor ".join(", ".join(ops) for ops in BEAM_STEP_OPS.values()) + ")")
        except CheckoutError as e:
            mods.pop(rel, None)
            optional_missing[rel] = str(e)
    recorded, head = _recorded(root), _git_head(root)
    files = {}
    for rel in list(REQUIRED) + [r for r in OPTIONAL if r in mods]:
        path = f"{SAMPLER_DIR}/{rel}"
        commit, sha = recorded.get(path, (head, None))
        files[path] = {"commit": commit, "sha256": _sha256(root / path), "recorded_sha256": sha}
    eng = Engine(root=root, vanilla=mods["ops/vanilla.py"], token_ban=mods["token_ban.py"],
                 seed_manager=mods["seed_manager.py"], beam_search=mods.get("beam_search.py"),
                 sampler_strategy=mods.get("sampler_strategy.py"), finish_reasons=mods.get("finish_reasons.py"),
                 optional_missing=optional_missing, files=files,
                 version=_version(root))
    _cache[root] = eng
    return eng
