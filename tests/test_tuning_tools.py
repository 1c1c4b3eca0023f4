"""The GPU tuning run's tools on a CPU: picking a set, Nsight Compute's CSV, usage errors (benchmarks/tuning.py,
benchmarks/ncu_summary.py)."""

import json

import pytest

from benchmarks.ncu_summary import main as ncu_main, summarise
from benchmarks.tuning import compare, main as tuning_main, pick


def _pt(opts, B, mix, us):
    return {"options": opts, "batch": B, "vocab": 128256, "mix": mix, "total_us": us}


def test_pick_sums_each_set_and_skips_incomplete_ones():
    doc = {"points": [_pt({}, 256, "p09", 900.0), _pt({}, 1024, "p09", 2900.0),            # 3800
                      _pt({"stages": 4, "block": 1024}, 256, "p09", 1000.0),
                      _pt({"stages": 4, "block": 1024}, 1024, "p09", 2700.0),              # 3700: fastest
                      _pt({"kmax": 4096}, 256, "p09", 100.0)]}                             # one point: not ranked
    best, ranked = pick(doc)
    assert best == "stages=4,block=1024"
    assert ranked == [("stages=4,block=1024", 3700.0, 2), ("default", 3800.0, 2)]
    with pytest.raises(ValueError, match="no points"):
        pick({"points": []})


def test_pick_cli_prints_the_set_and_refuses_a_bad_file(tmp_path, capsys):
    f = tmp_path / "kt.json"
    f.write_text(json.dumps({"points": [_pt({}, 256, "p09", 5.0), _pt({"stages": 2}, 256, "p09", 4.0)]}))
    assert tuning_main(["pick", str(f)]) == 0
    out = capsys.readouterr()
    assert out.out == "stages=2\n" and "default" in out.err
    (tmp_path / "bad.json").write_text("{}")
    assert tuning_main(["pick", str(tmp_path / "bad.json")]) == 2
    assert "no points" in capsys.readouterr().err


def test_warm_and_call_check_the_set_before_cuda(capsys):
    with pytest.raises(SystemExit) as e:
        tuning_main(["warm", "stages=9"])
    assert e.value.code == 2 and "set 'stages=9': fused_sample option stages=9" in capsys.readouterr().err


NCU = '''==PROF== Connected to process 1 (/usr/bin/python3.12)
warm ok
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python3.12","127.0.0.1","_hist_kernel","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","ns","708,320"
"0","1","python3.12","127.0.0.1","_hist_kernel","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","Occupancy","Achieved Occupancy","%","23.70"
"1","1","python3.12","127.0.0.1","_refine_kernel","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","Launch Statistics","Waves Per SM","","3.88"
'''


def test_ncu_csv_summary(tmp_path):
    assert summarise(NCU.splitlines(True)) == {
        "_hist_kernel": {"Duration (ns)": "708320", "Achieved Occupancy (%)": "23.70"},
        "_refine_kernel": {"Waves Per SM": "3.88"}}
    with pytest.raises(ValueError, match="no ncu CSV header"):
        summarise(["==PROF== nothing\n"])
    (tmp_path / "a.csv").write_text(NCU)
    assert ncu_main([str(tmp_path / "s.json"), f"default={tmp_path / 'a.csv'}"]) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["configs"]["default"]["_hist_kernel"]["Duration (ns)"] == "708320"
    assert ncu_main([str(tmp_path / "s.json"), str(tmp_path / "a.csv")]) == 2        # no LABEL=
    # a tuning set as the label holds "=" itself (gpu_ci.sh's profile stage passes the picked set)
    assert ncu_main([str(tmp_path / "s.json"), f"unit_t=True={tmp_path / 'a.csv'}"]) == 0
    assert list(json.loads((tmp_path / "s.json").read_text())["configs"]) == ["unit_t=True"]


def test_compare_two_kernel_times_files(tmp_path, capsys):
    """gpu_ci.sh's ``ab`` stage: the points both files hold, base and new GPU time and the change."""
    base = {"points": [_pt({}, 256, "p09", 1000.0), _pt({}, 1024, "p09", 2696.0), _pt({}, 1024, "greedy", 209.0)]}
    new = {"points": [_pt({}, 1024, "p09", 2157.0), _pt({}, 256, "p09", 800.0), _pt({}, 64, "p09", 1.0)]}
    assert compare(base, new) == [(256, 128256, "p09", 1000.0, 800.0, 800.0 / 1000.0 - 1),
                                  (1024, 128256, "p09", 2696.0, 2157.0, 2157.0 / 2696.0 - 1)]
    with pytest.raises(ValueError, match="no point and mix in common"):
        compare(base, {"points": [_pt({}, 64, "p09", 1.0)]})
    with pytest.raises(ValueError, match="no points"):
        compare({}, new)
    (tmp_path / "b.json").write_text(json.dumps(base))
    (tmp_path / "n.json").write_text(json.dumps(new))
    assert tuning_main(["compare", str(tmp_path / "b.json"), str(tmp_path / "n.json")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "  256 x 128256  p09      base    1000.0 us  new     800.0 us  -20.0%",
        " 1024 x 128256  p09      base    2696.0 us  new    2157.0 us  -20.0%"]
    assert tuning_main(["compare", str(tmp_path / "b.json"), str(tmp_path / "missing.json")]) == 2
    assert "FileNotFoundError" in capsys.readouterr().err


def test_sample_bracket_bound_hand_checked():
    """``benchmarks.sample_bracket.bound`` on 8 masses [1, 1/2, ..., 1/32, 0, 0] (total 1.96875), top-p 0.9, no margin:
    the tail below the boundary is 0.196875. Everything sampled (stride 1, blocks of 2): ascending cumulative masses
    0, 0, 0.03125, 0.09375, 0.21875, ... first reach it at the fifth, so the bound is the fourth value, 0.0625 (the
    list [1, 1/2, 1/4, 1/8, 1/16]: the kept set of 4, 1.875 / 1.96875 = 0.952 >= 0.9, and one more). Blocks 0 and 2
    of 2 (stride 2): samples [1, 1/2, 1/16, 1/32] scaled by 2, cumulative 0.0625, 0.1875, 1.1875: the same bound."""
    import numpy as np
    from benchmarks.sample_bracket import bound
    e = np.array([1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.0, 0.0])
    assert float(e.sum()) == 1.96875
    assert bound(e, 1.96875, 0.9, 0.0, stride=1, block=2) == 0.0625
    assert bound(e, 1.96875, 0.9, 0.0, stride=2, block=2) == 0.0625
    # a margin as large as the tail: nothing may be left out
    assert bound(e, 1.96875, 0.9, 0.1, stride=1, block=2) == 0.0
