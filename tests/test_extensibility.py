"""A check kind and an implementation defined here, in test code only, run through run, golden, report, record, diff.

Nothing under ``harness/`` knows them: the kind registers with :func:`harness.corpus.kinds.register`,
the implementation is an object speaking the protocol of :mod:`impls.base`. The classes live at
module level so that they pickle into the worker processes the run starts.
"""

import json

import pytest

from harness.corpus import kinds
from harness.corpus.load import CaseError, load_case
from harness.judge import Judge
from harness.judge.verdict import Evidence, verdict
from harness.kinds.rows import RowsKind, where
from harness.records import golden, records
from harness.report import diff as D
from harness.run.runner import run
from impls.profiles import TRTLLM
from impls.reference import Reference


def _kept(result) -> int:
    """How many tokens a row could have drawn: its distribution's support (1 for a greedy row)."""
    if result.error is not None:
        return 0
    return int((result.probs > 0).sum()) if result.probs is not None else 1


class KeptCount(RowsKind):
    """``check = "kept-count"``: each row's support size against its profile's prediction.

    The case's hand-written truth is the top-level ``kept`` list (one size per row, default profile).
    """

    name = "kept-count"
    record_keys = None   # records keep every output it observes ("kept")
    case_fields = {**RowsKind.case_fields, "kept": {"type": "array", "items": {"type": "integer", "minimum": 0}}}
    exclusive_fields = ("kept",)

    def load(self, data, shown):
        attrs, used = super().load(data, shown)
        n = sum(len(b.rows) for b in attrs["batches"])
        if len(data.get("kept", [])) != n:
            raise CaseError(shown, "kept", f"needs one size per row ({n})")
        attrs["kept"] = list(data["kept"])
        return attrs, used

    def evaluate(self, judge, case, impl, version):
        default = [_kept(r) for b in self.predict(judge, case, TRTLLM) for r in b]
        pred = [_kept(r) for b in self.predict(judge, case, impl.profile) for r in b]
        actual = [_kept(r) for b in self.run(judge, case, impl) for r in b]
        labels = [where(b, r) for b in case.batches for r in b.rows]
        rows = [{"row": w, "actual": {"kept": a}, "predicted": {"kept": p}, "default": {"kept": d},
                 "mismatches": [] if a == p else [f"kept: got {a}, want {p}"]}
                for w, a, p, d in zip(labels, actual, pred, default)]
        ev = Evidence(details={"rows": rows, "profile": impl.profile.name})
        if default != case.payload["kept"]:
            ev.broken_case = f"the case says {case.payload['kept']}, the reference {default}"
        bad = [r["row"] for r in rows if r["mismatches"]]
        ev.own = f"{len(bad)} row(s) keep another number of tokens: {', '.join(bad)}" if bad else None
        ev.differs = pred != default
        ev.diff_message = lambda fields: "the profile keeps another number of tokens"
        return verdict(judge, case, impl, version, ev)

    def golden_record(self, judge, case, profile_name):
        from impls.profiles import PROFILES
        pred = self.predict(judge, case, PROFILES[profile_name])
        return {"case": case.id, "profile": profile_name, "reference_version": "test",
                "kept": [_kept(r) for b in pred for r in b]}


KEPT = KeptCount()


class Dummy(Reference):
    """A third-party sampler: the reference's code, under its own name and version."""

    def __init__(self):
        super().__init__(TRTLLM, name="dummy")
        self.features = frozenset({"temperature", "top_k", "seed"})
        self.devices = frozenset({"cpu"})
        self.stages = {"filters": "own", "draw": "own"}

    def version(self):
        return "1.0"


class BrokenDummy(Dummy):
    """Version 2 of the same sampler, which forgets top-k: every row keeps the whole vocabulary."""

    def version(self):
        return "2.0"

    def open_session(self, device="cpu"):
        inner = super().open_session(device)

        class Session:
            def step(self, rows):
                out = inner.step([r.replace(top_k=None) if r.top_k not in (None, 1) else r for r in rows])
                return out
        return Session()


CASE = """schema = 1
id = "filters/kept-count-demo"
description = "top-k 2 keeps two tokens; top-k 1 is greedy"
category = "filters"
features = ["top_k", "temperature"]
source = { url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }
check = "kept-count"
kept = [2, 1]

[[rows]]
logits = [1.0, 2.0, 3.0]
temperature = 1.0
top_k = 2

[[rows]]
logits = [1.0, 2.0, 3.0]
top_k = 1
"""


def test_a_kind_and_an_implementation_from_test_code_run_everywhere(tmp_path):
    kinds.register(KEPT)
    try:
        root = tmp_path / "cases"
        (root / "filters").mkdir(parents=True)
        path = root / "filters" / "kept-count-demo.toml"
        path.write_text(CASE)
        case = load_case(path, root)
        assert case.kind is KEPT and case.payload["kept"] == [2, 1]

        # run: in worker processes (the kind goes with them), with the report written
        out = run([Dummy(), "reference"], out_dir=tmp_path / "run1", progress=False, root=root)
        res = {r["impl"]: r for r in out.doc["results"]}
        assert {i: r["status"] for i, r in res.items()} == {"dummy": "pass", "reference": "pass"}
        assert res["dummy"]["check"] == "kept-count"
        assert [row["actual"] for row in res["dummy"]["details"]["rows"]] == [{"kept": 2}, {"kept": 1}]
        assert out.doc["run"]["impls"]["dummy"]["isolation"] == "process"
        assert out.doc["run"]["impls"]["dummy"]["stages"] == {"filters": "own", "draw": "own"}
        html = out.html_path.read_text()
        assert "kept-count-demo" in html and "<code>dummy</code>" in html

        # golden: the kind writes and compares its own record
        judge = Judge([], 1)
        groot = tmp_path / "golden"
        assert [p.name for p, _ in golden.update([case], judge, ("trtllm",), groot, accept=True)] == [
            "kept-count-demo.json"]
        assert json.loads((groot / "trtllm" / "filters" / "kept-count-demo.json").read_text())["kept"] == [2, 1]
        assert golden.check([case], judge, ("trtllm",), groot) == []

        # records and diff: version 2 forgets top-k and is caught
        out2 = run([BrokenDummy()], out_dir=tmp_path / "run2", progress=False, root=root)
        bad = out2.doc["results"][0]
        assert bad["status"] == "fail" and bad["details"]["message"] == "1 row(s) keep another number of tokens: main:0"
        a = records.load(records.write(records.from_results(out.doc, "dummy"), tmp_path / "a.json"))
        b = records.load(records.write(records.from_results(out2.doc, "dummy"), tmp_path / "b.json"))
        assert a["cases"]["filters/kept-count-demo"]["check"] == "kept-count"
        same = D.diff(a, a)
        assert not same["changed"]
        changed = D.diff(a, b)
        (entry,) = changed["cases"]
        assert changed["changed"] and entry["kind"] == "newly failing"
        assert [d for d in entry["details"] if "kept" in d] == ["row main:0: kept: 2 -> 3"]
    finally:
        kinds.unregister(KEPT.name)
    assert "kept-count" not in kinds.names()


def test_a_broken_case_of_the_new_kind_is_a_located_error(tmp_path):
    kinds.register(KEPT)
    try:
        root = tmp_path / "cases"
        (root / "filters").mkdir(parents=True)
        path = root / "filters" / "kept-count-demo.toml"
        path.write_text(CASE.replace("kept = [2, 1]", "kept = [2]"))
        with pytest.raises(CaseError) as e:
            load_case(path, root)
        assert (e.value.field, e.value.reason) == ("kept", "needs one size per row (2)")
        # its exclusive field in another kind's case
        path.write_text(CASE.replace('check = "kept-count"', 'check = "exact"'))
        with pytest.raises(CaseError) as e:
            load_case(path, root)
        assert (e.value.field, e.value.reason) == ("kept", "only allowed when check = 'kept-count' (check is 'exact')")
    finally:
        kinds.unregister(KEPT.name)
    # without the kind, the check is unknown to the schema
    path.write_text(CASE)
    with pytest.raises(CaseError) as e:
        load_case(path, root)
    assert e.value.field == "check" and "kept-count" not in e.value.reason


def test_the_registry_refuses_a_clash():
    class Other(KeptCount):
        pass
    kinds.register(KEPT)
    try:
        with pytest.raises(ValueError, match=r"check kind 'kept-count' is already registered \(test_extensibility\)"):
            kinds.register(Other())
    finally:
        kinds.unregister(KEPT.name)
    assert set(kinds.names()) == {"exact", "statistical", "invariant", "scenario"}


def test_a_kind_registers_through_an_entry_point(tmp_path, monkeypatch):
    """The 'sampcheck.check_kinds' group: a distribution on the path that names a CheckKind is loaded with the builtins."""
    import textwrap
    info = tmp_path / "toy_kind_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-kind-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[sampcheck.check_kinds]\ntoy = toy_kind_mod:Toy\n")
    (tmp_path / "toy_kind_mod.py").write_text(textwrap.dedent("""
        from harness.corpus.kinds import CheckKind
        class Toy(CheckKind):
            name = "toy-kind"
            case_fields = {"toy": {"type": "integer"}}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    # a fresh registry: what a new process sees on its first lookup
    monkeypatch.setattr(kinds, "_KINDS", {})
    monkeypatch.setattr(kinds, "_RUNTIME", [])
    monkeypatch.setattr(kinds, "_STATE", {"loaded": False, "version": 0})
    import sys
    for mod in [m for m in sys.modules if m == "harness.kinds" or m.startswith("harness.kinds.")]:
        monkeypatch.delitem(sys.modules, mod)
    assert kinds.names() == ["exact", "statistical", "invariant", "scenario", "toy-kind"]
    assert type(kinds.get("toy-kind")).__module__ == "toy_kind_mod" and kinds.runtime_kinds() == []
