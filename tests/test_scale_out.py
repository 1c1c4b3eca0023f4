"""Running a corpus across machines and GPUs, and reporting to CI (issue #19 items 7 and 8).

* ``run --shard I/N`` and ``sampcheck merge``: the shards merged equal the unsharded run, case
  for case and output for output, in its order (harness/run/shard.py, harness/run/merge.py);
* one lane of workers per visible GPU (harness/run/lanes.py): without a GPU here, the lanes
  run on the CPU with the ``CUDA_VISIBLE_DEVICES`` each worker would get, and the test checks
  which worker saw which value;
* ``--junit-xml`` (harness/report/junit.py) and ``--smoke``.
"""

from __future__ import annotations

import doctest
import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cli import main
from harness.report import junit
from harness.run import lanes, merge
from harness.run.merge import MergeError
from harness.run.runner import run
from impls.profiles import TRTLLM
from impls.reference import Reference

ROOT = Path(__file__).resolve().parent.parent
#: Real cases: exact, a statistical one (its level must not change in a shard), a seeded scenario, bad input.
CASES = ["greedy/argmax-ties-lowest-id", "greedy/top-k-one-forces-greedy", "filters/min-p-before-top-p",
         "filters/top-k-two-statistical", "seeds/batch-order-independent", "bad_input/top-p-out-of-range",
         "finish/ignore-eos"]


def small_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "cases"
    for cid in CASES:
        (root / cid).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "cases" / f"{cid}.toml", root / f"{cid}.toml")
    (root / "greedy" / "broken.toml").write_text('schema = 1\nid = "greedy/broken"\n')
    return root


def outputs(doc: dict) -> list:
    """Every result but its time, in order."""
    return [(r["case"], r["impl"], r["status"], r["check"], json.dumps(r["details"], sort_keys=True),
             json.dumps(r.get("provenance"), sort_keys=True)) for r in doc["results"]]


def test_module_examples():
    for mod in (lanes, junit):
        res = doctest.testmod(mod)
        assert res.failed == 0 and res.attempted > 0, mod.__name__


# ------------------------------------------------------------------ shards

@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    root = small_corpus(tmp)
    impls = ["reference", "reference-hf"]
    whole = run(impls, None, tmp / "whole", progress=False, root=root, isolate=False).doc
    dirs = [tmp / f"s{i}" for i in (1, 2, 3)]
    for i, d in enumerate(dirs, 1):
        run(impls, None, d, progress=False, root=root, isolate=False, shard=(i, 3))
    return tmp, root, whole, dirs


def test_three_shards_merged_equal_the_unsharded_run(sharded):
    tmp, root, whole, dirs = sharded
    parts = [json.loads((d / "results.json").read_text()) for d in dirs]
    ids = ["bad_input/top-p-out-of-range", "filters/min-p-before-top-p", "filters/top-k-two-statistical",
           "finish/ignore-eos", "greedy/argmax-ties-lowest-id", "greedy/broken", "greedy/top-k-one-forces-greedy",
           "seeds/batch-order-independent"]
    assert [p["run"]["shard"]["cases"] for p in parts] == [ids[0::3], ids[1::3], ids[2::3]]
    assert [p["run"]["cases_selected"] for p in parts] == [3, 3, 2]
    # the statistical level is the declared corpus's in every shard
    assert {p["run"]["alpha_per_check"] for p in parts} == {whole["run"]["alpha_per_check"]}
    merged = merge.merge([dirs[2], dirs[0] / "results.json", dirs[1]])  # any order
    assert outputs(merged) == outputs(whole)
    run_ = merged["run"]
    assert run_["cases_selected"] == 8 and run_["cases_declared"] == 8
    assert [m["shard"] for m in run_["merged_from"]] == ["1/3", "2/3", "3/3"]
    assert run_["impls"] == whole["run"]["impls"]
    assert "shard" not in run_
    results_path, html_path = merge.write(merged, tmp / "merged", root=root)
    assert json.loads(results_path.read_text()) == merged
    assert "filters/top-k-two-statistical" in html_path.read_text()


def test_merge_refuses_shards_that_do_not_belong_together(sharded, tmp_path):
    tmp, root, whole, dirs = sharded
    with pytest.raises(MergeError) as ei:
        merge.merge([dirs[0], dirs[2]])
    assert str(ei.value) == f"{dirs[0] / 'results.json'}: shard(s) 2/3 missing (given: 1/3, 3/3)"
    with pytest.raises(MergeError) as ei:
        merge.merge([dirs[0], dirs[1], dirs[2], dirs[1]])
    assert str(ei.value) == (f"{dirs[1] / 'results.json'}: shard 2/3 is given twice (also "
                             f"{dirs[1] / 'results.json'})")
    with pytest.raises(MergeError) as ei:
        merge.merge([tmp / "whole"])
    assert str(ei.value) == (f"{tmp / 'whole' / 'results.json'}: not a shard (written without --shard): there is "
                             "nothing to merge it with")
    other = run(["reference", "reference-hf"], ["greedy"], tmp_path / "o", progress=False, root=root, isolate=False,
                shard=(2, 3))
    with pytest.raises(MergeError) as ei:
        merge.merge([dirs[0], other.results_path, dirs[2]])
    assert str(ei.value) == (f"{other.results_path}: its run selected other cases (3) than "
                             f"{dirs[0] / 'results.json'}'s (8): shards must run the same --cases on the same corpus")
    (tmp_path / "cut.json").write_text((dirs[0] / "results.json").read_text()[:200])
    with pytest.raises(MergeError, match=r"cut\.json: not valid JSON: .* at line \d+ column \d+$"):
        merge.merge([tmp_path / "cut.json"])
    with pytest.raises(MergeError) as ei:
        merge.merge([tmp_path / "nowhere"])
    assert str(ei.value) == f"{tmp_path / 'nowhere'}: no such file"
    hf = json.loads((dirs[1] / "results.json").read_text())
    hf["run"]["impls"]["reference-hf"]["version"] = "9"
    (tmp_path / "v.json").write_text(json.dumps(hf))
    with pytest.raises(MergeError) as ei:
        merge.merge([dirs[0], tmp_path / "v.json", dirs[2]])
    assert str(ei.value) == (f"{tmp_path / 'v.json'}: reference-hf: version '9', {dirs[0] / 'results.json'} has "
                             f"{whole['run']['impls']['reference-hf']['version']!r}: every shard must run the same "
                             "implementations")


def test_shard_and_merge_from_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    sel = ["--cases", "greedy", "--cases", "filters/top-k-two-statistical"]   # 20 greedy cases + 1
    base = ["run", *sel, "--no-progress", "--no-isolation"]
    assert main([*base, "--out", str(tmp_path / "whole")]) == 0
    for i in (1, 2, 3):
        assert main([*base, "--shard", f"{i}/3", "--out", str(tmp_path / f"s{i}")]) == 0
    capsys.readouterr()
    assert main(["merge", *[str(tmp_path / f"s{i}") for i in (1, 2, 3)], "--out", str(tmp_path / "m"),
                 "--junit-xml", str(tmp_path / "j.xml"), "--record", str(tmp_path / "rec.json")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'm' / 'results.json'} and {tmp_path / 'm' / 'index.html'} (3 shards, 21 cases)" in out
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())
    merged = json.loads((tmp_path / "m" / "results.json").read_text())
    assert outputs(merged) == outputs(whole)
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["format"] == "sampcheck-record" and len(rec["cases"]) == 21
    assert ET.parse(tmp_path / "j.xml").getroot().attrib["tests"] == "21"
    # bad usage
    for argv, message in [
        (["run", "--shard", "4/3", "--cases", "greedy"], "sampcheck run: --shard 4/3: I must lie in 1..3"),
        (["run", "--shard", "two", "--cases", "greedy"], "sampcheck run: --shard two: want I/N, e.g. 1/3"),
        (["merge", str(tmp_path / "s1"), str(tmp_path / "s3")], "sampcheck merge: "
         f"{tmp_path / 's1' / 'results.json'}: shard(s) 2/3 missing (given: 1/3, 3/3)"),
        (["merge", str(tmp_path / "s1"), "--impl", "reference"], "--impl chooses the implementation of --record"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_shard_with_no_case_still_writes_its_part(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = ["run", "--cases", "greedy/argmax-ties-lowest-id", "--no-progress", "--no-isolation"]
    assert main([*argv, "--shard", "2/2", "--out", str(tmp_path / "s2")]) == 0
    assert "sampcheck run: note: shard 2/2 holds no case (1 selected)" in capsys.readouterr().err
    assert main([*argv, "--shard", "1/2", "--out", str(tmp_path / "s1")]) == 0
    merged = merge.merge([tmp_path / "s1", tmp_path / "s2"])
    assert [(r["case"], r["status"]) for r in merged["results"]] == [("greedy/argmax-ties-lowest-id", "pass")]


def test_resume_refuses_another_shard(tmp_path):
    from harness.run.journal import Journal
    root = small_corpus(tmp_path)
    out = tmp_path / "r"
    j = Journal(out / Journal.NAME)
    j.open({"journal": 1, "impls": ["reference"], "cases": [], "started": "x", "shard": [1, 3]}, [])
    j.close()
    with pytest.raises(ValueError) as ei:
        run(["reference"], None, out, progress=False, root=root, isolate=False, shard=(2, 3), resume=True)
    assert str(ei.value) == (f"{out / Journal.NAME}: the interrupted run was shard 1/3, this one shard 2/3: resume "
                             "with the same --shard, or run afresh without --resume")


# ------------------------------------------------------------------ one lane per GPU

@pytest.mark.parametrize("env, count, want", [
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, None, ["0", "1"]),
    ({"CUDA_VISIBLE_DEVICES": "0,0"}, None, ["0", "0"]),  # two lanes sharing one GPU: the split on a one-GPU host
    ({"CUDA_VISIBLE_DEVICES": "GPU-8f1c,GPU-77aa"}, None, ["GPU-8f1c", "GPU-77aa"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, None, []),
    ({"CUDA_VISIBLE_DEVICES": "3,-1,2"}, None, ["3"]),
    ({}, 8, ["0", "1", "2", "3", "4", "5", "6", "7"]),
    ({}, 1, ["0"]),
    ({}, 0, []),
])
def test_visible_gpus(env, count, want):
    assert lanes.visible_gpus(env, device_count=lambda: count) == want


def test_lane_envs():
    assert lanes.lane_envs(None) == [None] and lanes.lane_envs(["5"]) == [None]
    assert lanes.lane_envs(["2", "5"]) == [{"CUDA_VISIBLE_DEVICES": "2"}, {"CUDA_VISIBLE_DEVICES": "5"}]


class SeesItsGpu(Reference):
    """The reference, writing ``<pid> <CUDA_VISIBLE_DEVICES> <first logit>`` to a file at every step."""

    def __init__(self, path: Path):
        super().__init__(TRTLLM, name="sees-gpu")
        self.path = str(path)

    def open_session(self, device="cpu"):
        inner, path = super().open_session(device), self.path

        class S:
            def step(self, rows):
                with open(path, "a") as fh:
                    fh.write(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')} "
                             f"{float(rows[0].logits[0])}\n")
                return inner.step(rows)
        return S()


def test_one_worker_per_gpu_each_with_its_own_cuda_visible_devices(tmp_path):
    """Two lanes ("GPUs" 0 and 1: on the CPU here) split the cases; each worker sees only its GPU."""
    from test_isolation import CASE
    root = tmp_path / "cases"
    (root / "greedy").mkdir(parents=True)
    for k in range(8):
        (root / "greedy" / f"c{k}.toml").write_text(CASE.format(name=f"c{k}", first=float(k) + 0.5,
                                                                token=0 if k >= 3 else 2))
    seen = tmp_path / "seen.txt"
    one = run(["reference", SeesItsGpu(tmp_path / "one.txt")], None, tmp_path / "one", progress=False, root=root)
    two = run(["reference", SeesItsGpu(seen)], None, tmp_path / "two", progress=False, root=root, gpus=["0", "1"])
    assert outputs(two.doc) == outputs(one.doc)  # same results, same order
    lines = [line.split() for line in seen.read_text().splitlines()]
    assert len(lines) == 8
    per_pid = {}
    for pid, gpu, _first in lines:
        per_pid.setdefault(pid, set()).add(gpu)
    assert sorted(g for gs in per_pid.values() for g in gs) == ["0", "1"]  # two workers, one GPU each
    assert all(len(gs) == 1 for gs in per_pid.values())
    assert sorted(float(first) for _p, _g, first in lines) == [k + 0.5 for k in range(8)]  # each case once
    meta = two.doc["run"]["impls"]
    assert meta["sees-gpu"]["gpus"] == ["0", "1"] and meta["reference"]["gpus"] == ["0", "1"]
    assert sorted(p.name for p in (tmp_path / "two" / "workers").iterdir()) == [
        "reference-lane0.log", "reference-lane1.log", "sees-gpu-lane0.log", "sees-gpu-lane1.log"]
    assert "gpus" not in one.doc["run"]["impls"]["reference"]


# ------------------------------------------------------------------ JUnit XML and the smoke tier

def test_junit_xml_maps_every_status(tmp_path):
    doc = {"run": {"started": "2026-12-03T10:00:00+00:00", "host": "h",
                   "impls": {"x": {"device": "cpu"}, "y": {"device": "cuda", "spec": "pkg.mod:Y"}}},
           "results": [
               {"case": "a/pass", "impl": "x", "status": "pass", "check": "exact", "seconds": 0.25,
                "details": {"message": "ok"}},
               {"case": "a/kd", "impl": "x", "status": "known-diff", "check": "exact", "seconds": 0.0,
                "details": {"message": "top_p_rule differs"}},
               {"case": "a/kb", "impl": "x", "status": "known-bug", "check": "exact", "seconds": 0.0,
                "details": {"message": "finding F-1"}},
               {"case": "a/fail", "impl": "y", "status": "fail", "check": "exact", "seconds": 1.0,
                "details": {"message": "1 row(s) differ\x07"}},
               {"case": "a/err", "impl": "y", "status": "error", "check": "load", "seconds": 0.0,
                "details": {"message": "bad <file> & more"}},
               {"case": "a/na", "impl": "y", "status": "n/a", "check": "exact", "seconds": 0.0,
                "details": {"message": "no beam"}},
               {"case": "a/skip", "impl": "y", "status": "skip", "check": "exact", "seconds": 0.0,
                "details": {"message": "not installed"}}]}
    text = junit.junit_xml(doc)
    top = ET.fromstring(text.encode("utf-8"))
    assert top.attrib == {"name": "sampcheck", "tests": "7", "failures": "1", "errors": "1", "skipped": "2",
                          "time": "1.250"}
    x, y = top.findall("testsuite")
    assert x.attrib["name"] == "sampcheck.x" and x.attrib["tests"] == "3" and x.attrib["failures"] == "0"
    assert [tc.find("system-out").text if tc.find("system-out") is not None else None for tc in x] == [
        None, "known-diff: top_p_rule differs", "known-bug: finding F-1"]
    fail, err, na, skip = list(y)
    assert fail.find("failure").attrib == {"message": "1 row(s) differ?", "type": "fail"}
    assert fail.find("failure").text == ("1 row(s) differ?\nreproduce: sampcheck run --cases a/fail --impl pkg.mod:Y "
                                         "--device cuda --out reports/repro")
    assert err.find("error").attrib == {"message": "bad <file> & more", "type": "error"}
    assert err.find("error").text.endswith("reproduce: sampcheck run --cases a/err --out reports/repro")
    assert na.find("skipped").attrib == {"message": "n/a: no beam"}
    assert skip.find("skipped").attrib == {"message": "skip: not installed"}
    assert fail.attrib == {"classname": "y", "name": "a/fail", "time": "1.000"}


def test_run_writes_junit_xml_and_smoke_selects_the_smoke_tier(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "junit.xml"
    assert main(["run", "--smoke", "--no-progress", "--no-isolation", "--out", str(tmp_path / "r"),
                 "--junit-xml", str(target)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    from harness.corpus.load import _tags, discover
    smoke = sorted(str(p.relative_to(ROOT / "cases").with_suffix("")) for p in discover(ROOT / "cases")
                   if "smoke" in _tags(p))
    assert sorted(r["case"] for r in doc["results"]) == smoke and len(smoke) >= 16
    suite = ET.parse(target).getroot().find("testsuite")
    assert suite.attrib["name"] == "sampcheck.reference" and suite.attrib["tests"] == str(len(smoke))
    assert f"wrote {target}" in out
    assert main(["run", "--cases", "greedy", "--junit-xml", str(tmp_path / "no" / "j.xml")]) == 2
    assert f"--junit-xml {tmp_path / 'no' / 'j.xml'}: folder {tmp_path / 'no'} does not exist" in \
        capsys.readouterr().err
    # inside the --out folder the run creates: written there (a fresh-user pass found it refused)
    fresh = tmp_path / "new-out"
    assert main(["run", "--cases", "greedy/top-k-one-forces-greedy", "--no-progress", "--no-isolation",
                 "--out", str(fresh), "--junit-xml", str(fresh / "j.xml")]) == 0
    assert ET.parse(fresh / "j.xml").getroot().find("testsuite").attrib["tests"] == "1"
