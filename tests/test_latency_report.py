"""The latency report (harness/latency.py) and the latency suite's helpers (benchmarks/latency.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from benchmarks.latency import Point, mix_params, sort_based
from harness.cli import main
from harness.latency import LatencyError, load_bench, render_html, summarise

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
    # vs FlashInfer: 25/100 = 0.25 and 40/70 = 0.571 > 0.5: not met, worst at B=256
    assert (t["vs_flashinfer"]["checked"], t["vs_flashinfer"]["met"]) == (2, False)
    assert t["vs_flashinfer"]["worst"] == "0.57x at k50_p09 B=256 V=128256"
    # vs floor at batch >= 256: 40/20 = 2.0 and 30/20 = 1.5, both <= 3
    assert (t["vs_floor"]["checked"], t["vs_floor"]["met"]) == (2, True)
    # greedy vs argmax: 30/24 = 1.25 > 1.2
    assert (t["vs_argmax"]["met"], t["vs_argmax"]["worst"]) == (False, "1.25x at greedy B=256 V=128256")
    assert (t["batch1"]["met"], t["batch1"]["worst"]) == (True, "25.0 us")


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
