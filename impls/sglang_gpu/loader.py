"""Load SGLang's sampler from a source bundle (:mod:`.bundle`), with stand-ins for the rest of SGLang.

The files of :data:`.bundle.SPECS` marked *loaded* are executed **by file path**, in order,
as the modules SGLang gives them (``sglang.srt.layers.sampler``, ``sgl_kernel.sampling``,
...), after :func:`.bundle.verify` has checked every file's SHA-256 against the bundle's
manifest. Their imports of other SGLang modules are answered by the loaded files themselves
or by the smallest stand-ins (modules built here, marked ``__sampcheck_stub__``), as in
:mod:`impls.vllm_gpu.loader`. Everything that decides a token is SGLang's: which branch runs
(``SamplingBatchInfo.from_schedule_batch``'s ``is_all_greedy`` and ``need_*_sampling``,
``Sampler.forward`` / ``_sample_from_probs``), the calls into FlashInfer and their order,
``sgl_kernel``'s forwarding of the renormalisations, the softmax, the sampling mask.

Read, not executed whole (:func:`read_constants`, :func:`read_classes`):

* ``sglang/srt/sampling/sampling_params.py``: ``TOP_K_ALL`` and ``_SAMPLING_EPS`` (the file
  needs msgspec, absent from the GPU machine);
* ``sglang/srt/layers/logits_processor.py``: the definitions of ``SamplingMaskStatus``,
  ``SamplingMaskOutput`` and ``LogitsProcessorOutput``, executed alone in a namespace holding
  ``dataclasses``, ``IntEnum``, ``numpy``, ``torch`` and ``typing`` (the rest of the file imports
  the model machinery).

Stand-ins (what each answers; everything else they are asked for raises):

* ``sglang.srt.runtime_context``: ``get_exec()`` -> the server configuration of
  :func:`server_config` (``kernel.sampling_backend`` ``"flashinfer"`` on CUDA, SGLang's
  default when FlashInfer imports, ``arg_groups/overrides.py _sampling_backend_default``;
  ``"pytorch"`` for the CPU kind; no deterministic inference, no RL on-policy target, no
  custom logit processors, no watermark, ``sampling_mask_max_tokens`` covering any vocabulary);
  ``get_parallel()`` -> one rank (``tp_group.device_group`` None); ``get_server_args()``
  raises;
* ``sglang.srt.utils.common``: ``is_cuda()`` True for the CUDA kind (False for the CPU kind),
  ``is_hip``/``is_musa``/``is_npu``/``is_xpu``/``is_gfx1250_supported`` False,
  ``is_pin_memory_available`` False (pinning changes a copy's speed, not its values),
  ``get_bool_env_var`` False for the four flags ``sampler.py`` reads at import
  (``SGLANG_USE_AITER``, ``SGLANG_DISABLE_AITER_GREEDY_SAMPLE``, ``SYNC_TOKEN_IDS_ACROSS_TP``,
  ``SGLANG_RETURN_ORIGINAL_LOGPROB``: a default server's environment);
  ``sglang.srt.utils``: ``is_npu`` False and ``get_compiler_backend`` ``"inductor"`` (the
  backend of a ``torch.compile`` decorator of the penalizers, never called here);
* ``sglang.utils.LazyImport``: resolves ``module.name`` at the first call, as SGLang's does;
* ``sgl_kernel`` (package): the **loaded** ``sgl_kernel.sampling``'s ``top_k_renorm_prob`` and
  ``top_p_renorm_prob`` (its real ``__init__`` loads the compiled extension, built for torch
  2.14); ``sgl_kernel.utils`` is loaded;
* ``sglang.kernels.registry`` / ``.selector`` / ``.spec``: ``register_kernel`` records the
  specs, ``get_kernel`` raises, the spec names are inert values; and
  ``sglang.kernels.cake_kernels.sampling.supports_softmax`` -> False off SM 10.3 (the only
  capability the Cake softmax's ``KernelSpec`` lists; on SM 10.3 it raises: the Cake kernel is
  not bundled); ``sglang.kernels.ops.sampling.murmur_hash.murmur_hash32`` raises (seeded
  sampling, deterministic inference only);
* ``sglang.srt.layers.dp_attention.is_dp_attention_enabled`` -> False;
  ``sglang.srt.layers.logprob_processor.OutputLogprobProcessor``: built by ``Sampler.__init__``,
  its methods raise (the adapter asks for no logprobs);
* ``sglang.srt.constrained.base_grammar_backend`` (``BaseGrammarObject``, ``GrammarMask``,
  ``GrammarRow``), ``sglang.srt.sampling.custom_logit_processor.CustomLogitProcessor``,
  ``sglang.srt.managers.schedule_batch.ScheduleBatch``: placeholder classes (grammars, custom
  processors and watermarks are off; the adapter's batch is not a ``ScheduleBatch``);
  ``sglang.srt.sampling.watermarking.core.build_watermark_batch_config`` raises;
* ``sglang.srt.sampling.sampling_params``: ``TOP_K_ALL``, read from the bundle;
* ``sglang.srt.layers.logits_processor``: the three classes read from the bundle.

The stand-ins live in ``sys.modules`` only while the files execute: afterwards every
``sglang*`` and ``sgl_kernel*`` entry is put back as it was (a real SGLang in the same process,
as in the ``sglang`` tox env, is left alone); the loaded modules keep what they imported, and
:meth:`Engine.active` puts the same view back while SGLang's functions run (some import inside
a function).
``flashinfer`` is the process's own (``sgl_kernel/sampling.py`` imports ``flashinfer.sampling``
at load time, ``sampler.py``'s ``LazyImport`` at the first call). Each :class:`Engine` is
cached per (bundle, kind).

**Kinds.** ``"cuda"``: what a CUDA server runs (``is_cuda()`` True, so ``sampler.py`` imports
``sgl_kernel``'s renormalisations, and the FlashInfer backend). ``"cpu"``: a CPU server
(``is_cuda()`` False, the pytorch backend: ``top_k_top_p_min_p_sampling_from_probs_torch``),
which lets the loading be checked against the reference on a machine without a GPU.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import sys
import types
import typing
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Optional

from ..trtllm.loader import RecordingLogger, exec_source, raising_stub, stand_in
from .. import _bundle as _shared
from . import bundle as _bundle
from .bundle import BundleError

__all__ = ["Engine", "ENV_VAR", "DEFAULT_BUNDLE", "KINDS", "find_bundle", "shown_path", "load", "server_config",
           "read_constants", "read_classes", "BundleError"]

#: Environment variable naming the bundle (``sampcheck --sglang-src`` sets it).
ENV_VAR = "SAMPCHECK_SGLANG_SRC"
#: Where the bundle is looked for when :data:`ENV_VAR` is unset, relative to the working directory
#: and then to the checkout this package runs from.
DEFAULT_BUNDLE = ".whl/sglang-src"
#: The platform kinds a bundle can be loaded for (module docstring, "Kinds").
KINDS = ("cuda", "cpu")
#: The boolean environment flags ``sampler.py`` reads with ``get_bool_env_var`` at import.
_ENV_FLAGS = frozenset({"SGLANG_USE_AITER", "SGLANG_DISABLE_AITER_GREEDY_SAMPLE", "SYNC_TOKEN_IDS_ACROSS_TP",
                        "SGLANG_RETURN_ORIGINAL_LOGPROB"})
#: The class definitions executed out of ``srt/layers/logits_processor.py``.
_LOGITS_CLASSES = ("SamplingMaskStatus", "SamplingMaskOutput", "LogitsProcessorOutput")

_cache: dict = {}


shown_path = _shared.shown_path


def find_bundle(path: Optional[str] = None) -> Path:
    """The bundle to load: ``path``, else ``$SAMPCHECK_SGLANG_SRC``, else ``./.whl/sglang-src``, else the checkout's
    (:func:`impls._bundle.locate`)."""
    return _shared.locate(path, ENV_VAR, DEFAULT_BUNDLE)


class _Bag:
    """A read-only configuration group whose unknown attributes raise (a stand-in asked for more is a bug)."""

    def __init__(self, what: str, **values):
        object.__setattr__(self, "_what", what)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"{self._what}.{name}: a stand-in under sampcheck holding only "
                             f"{', '.join(sorted(values))} (impls/sglang_gpu/loader.py)")

    def __setattr__(self, name, value):
        raise AttributeError(f"{self._what} is read-only under sampcheck")

    def __repr__(self) -> str:
        return f"{self._what}({', '.join(f'{k}={v!r}' for k, v in sorted(self._values.items()))})"


def server_config(kind: str) -> _Bag:
    """The server configuration the stand-in ``get_exec()`` answers for ``kind`` (module docstring).

    Returns
    -------
    _Bag
        ``deterministic`` (``enable_deterministic_inference`` False, ``rl_on_policy_target``
        None), ``kernel.sampling_backend`` (``"flashinfer"`` for ``"cuda"``, ``"pytorch"`` for
        ``"cpu"``), ``features`` (``sampling_mask_max_tokens`` ``2**30``,
        ``enable_custom_logit_processor`` and ``enable_watermark`` False).
    """
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    return _Bag("get_exec()",
                deterministic=_Bag("get_exec().deterministic", enable_deterministic_inference=False,
                                   rl_on_policy_target=None),
                kernel=_Bag("get_exec().kernel", sampling_backend="flashinfer" if kind == "cuda" else "pytorch"),
                features=_Bag("get_exec().features", sampling_mask_max_tokens=1 << 30,
                              enable_custom_logit_processor=False, enable_watermark=False))


def _const(node):
    # an int/float literal, or +, -, *, << of such (TOP_K_ALL = 1 << 30)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.LShift, ast.Add, ast.Sub, ast.Mult)):
        a, b = _const(node.left), _const(node.right)
        return {ast.LShift: lambda: a << b, ast.Add: lambda: a + b, ast.Sub: lambda: a - b,
                ast.Mult: lambda: a * b}[type(node.op)]()
    return ast.literal_eval(node)


def read_constants(path: Path, names) -> dict:
    """Module-level constants of a source file (literals, or ``+ - * <<`` of them), without executing it.

    Raises
    ------
    BundleError
        A name is not assigned such a value at module level.
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    out = {}
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        for t in targets:
            if isinstance(t, ast.Name) and t.id in names and getattr(node, "value", None) is not None:
                try:
                    out[t.id] = _const(node.value)
                except (ValueError, TypeError, SyntaxError):
                    pass
    missing = sorted(set(names) - set(out))
    if missing:
        raise BundleError(f"{path}: defines no {', '.join(missing)} as a constant (read by "
                          "impls/sglang_gpu/loader.py)")
    return out


def read_classes(path: Path, names, module: str, namespace: dict) -> dict:
    """Execute only the named top-level class definitions of a source file, in order, in ``namespace``.

    Parameters
    ----------
    path : Path
    names : sequence of str
        Class names; each definition (decorators included) runs after the previous ones, so a
        later class may refer to an earlier one.
    module : str
        ``__module__`` of the classes.
    namespace : dict
        The globals they see (the names their bodies and annotations use).

    Returns
    -------
    dict
        Name -> class.

    Raises
    ------
    BundleError
        A class is not defined there, or its definition fails (the message names it).
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    defs = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    mod = types.ModuleType(module)   # dataclasses looks the class's module up in sys.modules
    mod.__dict__.update(namespace)
    mod.__file__ = str(path)
    before = sys.modules.get(module)
    sys.modules[module] = mod
    out = {}
    try:
        for name in names:
            if name not in defs:
                raise BundleError(f"{path}: defines no class {name} (read by impls/sglang_gpu/loader.py)")
            code = compile(ast.Module(body=[defs[name]], type_ignores=[]), str(path), "exec")
            try:
                exec(code, mod.__dict__)
            except Exception as e:
                raise BundleError(f"{path}: the definition of {name} failed: {type(e).__name__}: {e}") from None
            out[name] = mod.__dict__[name]
    finally:
        if before is None:
            del sys.modules[module]
        else:
            sys.modules[module] = before
    return out


@dataclass
class Engine:
    """The loaded SGLang modules of one bundle and what is known about them.

    Attributes
    ----------
    root : Path
        The bundle.
    kind : str
        ``"cuda"`` or ``"cpu"`` (module docstring, "Kinds").
    modules : dict
        Dotted name (``sglang.srt.layers.sampler``, ``sgl_kernel.sampling``) -> the loaded module.
    manifest : dict
        The verified manifest.
    constants : dict
        ``TOP_K_ALL`` and ``_SAMPLING_EPS`` read from ``sampling_params.py``.
    classes : dict
        ``SamplingMaskStatus``, ``SamplingMaskOutput``, ``LogitsProcessorOutput``.
    config : _Bag
        What the stand-in ``get_exec()`` answers (:func:`server_config`).
    kernels : list
        The kernel specs the loaded files registered (``register_kernel`` stand-in).
    """

    root: Path
    kind: str
    modules: dict
    manifest: dict
    constants: dict
    classes: dict
    config: _Bag
    kernels: list = field(default_factory=list)
    view: dict = field(default_factory=dict)
    logger: RecordingLogger = field(default_factory=RecordingLogger)

    @contextlib.contextmanager
    def active(self):
        """Put this engine's modules (loaded files and stand-ins) into ``sys.modules`` while SGLang's code runs.

        SGLang imports some names inside functions (``from_schedule_batch`` imports
        ``ScheduleBatch``, the sampler's ``softmax`` the Cake kernel's ``supports_softmax``):
        those imports must find the stand-ins. Every ``sglang*`` / ``sgl_kernel*`` entry is put
        back as it was on exit.
        """
        saved = {k: v for k, v in sys.modules.items() if _owned(k)}
        for k in saved:
            del sys.modules[k]
        sys.modules.update(self.view)
        try:
            yield self
        finally:
            for k in [k for k in sys.modules if _owned(k)]:
                del sys.modules[k]
            sys.modules.update(saved)

    def __getitem__(self, dotted: str) -> types.ModuleType:
        """A loaded module by its dotted name (``engine["sglang.srt.layers.sampler"]``)."""
        return self.modules[dotted]

    @property
    def sampler(self) -> types.ModuleType:
        """``sglang.srt.layers.sampler``."""
        return self.modules["sglang.srt.layers.sampler"]

    @property
    def batch_info(self) -> types.ModuleType:
        """``sglang.srt.sampling.sampling_batch_info``."""
        return self.modules["sglang.srt.sampling.sampling_batch_info"]

    def versions(self) -> dict:
        """``{"sglang": "0.5.23", "sglang-kernel": "0.4.10"}`` (from the manifest)."""
        return _bundle.versions(self.manifest)

    @property
    def version(self) -> str:
        """The SGLang version the bundle's files come from."""
        return str(self.manifest["version"])

    def files(self) -> dict:
        """Path -> SHA-256 of every bundled file (as verified)."""
        return {k: v["sha256"] for k, v in self.manifest["files"].items()}


def _module_name(package: str, rel: str) -> str:
    rel = rel[:-len("/__init__.py")] if rel.endswith("/__init__.py") else rel[:-3]
    return f"{package}." + rel.replace("/", ".")


def _placeholder_class(what: str) -> type:
    def __init__(self, *a, **k):
        raise NotImplementedError(f"{what} is a stand-in under sampcheck; it is not built")
    return type(what.rsplit(".", 1)[-1], (), {"__init__": __init__, "__doc__": f"Stand-in for {what}."})


class _LazyImport:
    """Stand-in for ``sglang.utils.LazyImport``: ``module.name`` imported at the first call, then called."""

    def __init__(self, module: str, name: str):
        self._module, self._name, self._obj = module, name, None

    def __call__(self, *args, **kwargs):
        if self._obj is None:
            self._obj = getattr(importlib.import_module(self._module), self._name)
        return self._obj(*args, **kwargs)


class _OutputLogprobProcessor:
    """Stand-in for ``logprob_processor.OutputLogprobProcessor``: built, never asked (no logprobs requested)."""

    def __getattr__(self, name):
        raise NotImplementedError(f"OutputLogprobProcessor.{name} is a stand-in under sampcheck: the adapter asks "
                                  "SGLang for no logprobs")


def _get_bool_env_var(name: str, default: str = "false") -> bool:
    if name not in _ENV_FLAGS:
        raise NotImplementedError(f"get_bool_env_var({name!r}): the stand-in answers only "
                                  f"{', '.join(sorted(_ENV_FLAGS))} (impls/sglang_gpu/loader.py)")
    return False


def _supports_softmax(logits) -> bool:
    import torch
    if logits.is_cuda and torch.cuda.get_device_capability(logits.device) == (10, 3):
        raise NotImplementedError("the Cake softmax (SM 10.3) is not in the sampcheck bundle")
    return False


def _stand_ins(kind: str, consts: dict, classes: dict, kernels: list, config: _Bag) -> dict:
    pkgs = ("sglang", "sglang.srt", "sglang.srt.sampling", "sglang.srt.sampling.penaltylib",
            "sglang.srt.sampling.watermarking", "sglang.srt.layers", "sglang.srt.constrained",
            "sglang.srt.managers", "sglang.srt.arg_groups", "sglang.kernels", "sglang.kernels.ops",
            "sglang.kernels.ops.sampling", "sglang.kernels.cake_kernels", "sgl_kernel")
    mods = {name: stand_in(name, package=True) for name in pkgs}
    no = lambda *a, **k: False  # noqa: E731
    parallel = _Bag("get_parallel()", tp_group=_Bag("get_parallel().tp_group", device_group=None))

    def get_server_args():
        raise NotImplementedError("get_server_args is a stand-in under sampcheck (create_sampler is not driven)")

    spec_ns = types.SimpleNamespace(CAKE="cake", TRITON="triton")
    mods.update({
        "sglang.utils": stand_in("sglang.utils", LazyImport=_LazyImport),
        "sglang.srt.utils": stand_in("sglang.srt.utils", package=True, is_npu=no,
                                     get_compiler_backend=lambda *a, **k: "inductor"),
        "sglang.srt.utils.common": stand_in(
            "sglang.srt.utils.common", get_bool_env_var=_get_bool_env_var, is_cuda=lambda: kind == "cuda",
            is_hip=no, is_musa=no, is_npu=no, is_xpu=no, is_gfx1250_supported=no, is_pin_memory_available=no),
        "sglang.srt.runtime_context": stand_in("sglang.srt.runtime_context", get_exec=lambda: config,
                                               get_parallel=lambda: parallel, get_server_args=get_server_args),
        "sglang.srt.layers.dp_attention": stand_in("sglang.srt.layers.dp_attention", is_dp_attention_enabled=no),
        "sglang.srt.layers.logprob_processor": stand_in("sglang.srt.layers.logprob_processor",
                                                        OutputLogprobProcessor=_OutputLogprobProcessor),
        "sglang.srt.layers.logits_processor": stand_in("sglang.srt.layers.logits_processor", **classes),
        "sglang.srt.constrained.base_grammar_backend": stand_in(
            "sglang.srt.constrained.base_grammar_backend",
            **{n: _placeholder_class(f"base_grammar_backend.{n}") for n in ("BaseGrammarObject", "GrammarMask",
                                                                              "GrammarRow")}),
        "sglang.srt.sampling.custom_logit_processor": stand_in(
            "sglang.srt.sampling.custom_logit_processor",
            CustomLogitProcessor=_placeholder_class("custom_logit_processor.CustomLogitProcessor")),
        "sglang.srt.sampling.watermarking.core": stand_in(
            "sglang.srt.sampling.watermarking.core",
            build_watermark_batch_config=raising_stub("watermarking.core.build_watermark_batch_config")),
        "sglang.srt.sampling.sampling_params": stand_in("sglang.srt.sampling.sampling_params",
                                                        TOP_K_ALL=consts["TOP_K_ALL"]),
        "sglang.srt.managers.schedule_batch": stand_in(
            "sglang.srt.managers.schedule_batch", ScheduleBatch=_placeholder_class("schedule_batch.ScheduleBatch")),
        "sglang.kernels.registry": stand_in("sglang.kernels.registry", register_kernel=kernels.append),
        "sglang.kernels.selector": stand_in("sglang.kernels.selector",
                                            get_kernel=raising_stub("sglang.kernels.selector.get_kernel")),
        "sglang.kernels.spec": stand_in(
            "sglang.kernels.spec", CUDA_ONLY=frozenset({("cuda",)}), KernelBackend=spec_ns,
            KernelSpec=lambda **k: types.SimpleNamespace(**k),
            CapabilityRequirement=types.SimpleNamespace(cuda=lambda **k: ("cuda", *sorted(k.items())))),
        "sglang.kernels.cake_kernels.sampling": stand_in("sglang.kernels.cake_kernels.sampling",
                                                         supports_softmax=_supports_softmax),
        "sglang.kernels.ops.sampling.murmur_hash": stand_in(
            "sglang.kernels.ops.sampling.murmur_hash",
            murmur_hash32=raising_stub("sglang.kernels.ops.sampling.murmur_hash.murmur_hash32")),
    })
    for name, m in mods.items():  # submodules as attributes of their packages
        parent, _, child = name.rpartition(".")
        if parent in mods:
            setattr(mods[parent], child, m)
    return mods


def _logits_namespace() -> dict:
    import numpy as np
    import torch
    ns = {"dataclasses": dataclasses, "IntEnum": IntEnum, "np": np, "torch": torch}
    ns.update({n: getattr(typing, n) for n in ("Any", "Dict", "List", "Optional", "Tuple", "Union")})
    return ns


def _owned(name: str) -> bool:
    return name in ("sglang", "sgl_kernel") or name.startswith(("sglang.", "sgl_kernel."))


def load(root=None, kind: str = "cuda", fresh: bool = False) -> Engine:
    """Verify and load the bundle at ``root`` (default :func:`find_bundle`) for ``kind``.

    Parameters
    ----------
    root : path-like, optional
    kind : {"cuda", "cpu"}
        Module docstring, "Kinds". ``"cuda"`` needs ``flashinfer`` importable only when
        SGLang's code first calls it (``sgl_kernel/sampling.py`` falls back to its compiled
        ops, absent here, when ``flashinfer.sampling`` does not import).
    fresh : bool
        Load again, and keep the result out of the cache (tests that swap ``flashinfer`` for a
        double).

    Returns
    -------
    Engine
        Cached per resolved bundle path and kind (unless ``fresh``).

    Raises
    ------
    BundleError
        The bundle is missing or does not match its manifest (:func:`.bundle.verify`: a
        modified file is named with both hashes), or a file fails to load (its message names
        the file and the missing module or exception).
    """
    root = find_bundle(root) if root is None or isinstance(root, str) else Path(root)
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    key = (str(root.resolve()) if root.exists() else str(root), kind)
    if key in _cache and not fresh:
        return _cache[key]
    manifest = _bundle.verify(root)
    import torch  # noqa: F401  (the loaded files import it; fail here, not half-way)
    consts = read_constants(root / "sglang/srt/sampling/sampling_params.py", ("TOP_K_ALL", "_SAMPLING_EPS"))
    classes = read_classes(root / "sglang/srt/layers/logits_processor.py", _LOGITS_CLASSES,
                           "sglang.srt.layers.logits_processor", _logits_namespace())
    config = server_config(kind)
    kernels: list = []
    mods = _stand_ins(kind, consts, classes, kernels, config)
    saved = {k: v for k, v in sys.modules.items() if _owned(k)}
    for k in saved:
        del sys.modules[k]
    loaded = {}
    hint = " (impls/sglang_gpu/loader.py was written against SGLang 0.5.23 and sglang-kernel 0.4.10)"
    try:
        sys.modules.update(mods)
        for spec in (_bundle.SGL_KERNEL, _bundle.SGLANG):   # sgl_kernel first: sampler.py imports it
            for rel in spec.loaded:
                name = _module_name(spec.package, rel)
                if name == "sglang.srt.environ":
                    kpkg = sys.modules["sgl_kernel"]   # what sgl_kernel/__init__.py re-exports from sampling.py
                    smod = loaded["sgl_kernel.sampling"]
                    kpkg.top_k_renorm_prob, kpkg.top_p_renorm_prob = smod.top_k_renorm_prob, smod.top_p_renorm_prob
                mod = exec_source(name, root / spec.package / rel, f"{spec.package}/{rel}", BundleError, hint)
                if rel.endswith("__init__.py"):
                    mod.__path__ = []
                    for child, m in loaded.items():   # its submodules, loaded before it
                        if child.rpartition(".")[0] == name:
                            setattr(mod, child.rpartition(".")[2], m)
                loaded[name] = mod
                parent, _, child = name.rpartition(".")
                if parent in sys.modules:
                    setattr(sys.modules[parent], child, mod)
        view = {k: v for k, v in sys.modules.items() if _owned(k)}
    finally:
        for k in [k for k in sys.modules if _owned(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
    eng = Engine(root=root, kind=kind, modules=loaded, manifest=manifest, constants=consts, classes=classes,
                 config=config, kernels=kernels, view=view)
    if not fresh:
        _cache[key] = eng
    return eng
