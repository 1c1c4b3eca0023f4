"""The implementation registry (impls/registry.py): built-ins, entry points, ``module:Class`` specs."""

import os
import textwrap

import pytest

from impls import registry
from impls.base import DEVICES, FEATURES, PROVENANCE, ROLES, STAGES, stage_provenance


def test_builtin_names_in_registry_order():
    builtin = {e.name for e in registry.entries() if e.origin.startswith("impls.")}
    assert [n for n in registry.names("conformance") if n in builtin] == [
        "reference", "reference-hf", "reference-vllm", "reference-flashinfer", "reference-flashinfer-joint",
        "reference-llamacpp", "reference-sglang", "reference-sglang-flashinfer", "transformers", "transformers-beam", "fused", "flashinfer",
        "flashinfer-joint", "vllm", "vllm-triton", "vllm-flashinfer", "vllm-rejection", "trtllm", "llamacpp", "sglang",
        "sglang-flashinfer"]
    assert [n for n in registry.names("latency") if n in builtin] == [
        "fused", "flashinfer", "vllm-cpu", "vllm-triton", "vllm-flashinfer", "torch-sort", "argmax", "reference-cuda",
        "reference-cpu"]
    assert len(builtin) == 26 and len(set(registry.names())) == len(registry.names())
    # built-ins first, then entry points (the example adapter, where it is installed)
    assert registry.names()[:26] == [e.name for e in registry.entries() if e.name in builtin]


@pytest.mark.parametrize("name", [e.name for e in registry.entries() if e.problem is None])
def test_every_registered_implementation_declares_what_it_is(name):
    impl = registry.create(name)
    assert impl.name == name
    assert registry.roles_of(impl) <= set(ROLES) and registry.roles_of(impl)
    assert impl.devices and set(impl.devices) <= set(DEVICES)
    assert isinstance(impl.slow, bool)
    assert set(impl.features) <= set(FEATURES)
    stages = stage_provenance(impl)  # raises on an unknown stage or provenance
    assert set(stages.values()) <= set(PROVENANCE)
    if "conformance" in registry.roles_of(impl):
        assert impl.profile is not None and stages
        # opt-in: only the reference, which defines every feature, claims them all
        if not name.startswith("reference"):
            assert set(impl.features) != set(FEATURES) or name in ("fused", "trtllm"), name
    else:
        assert hasattr(impl, "latency_call")


def test_fused_and_trtllm_list_their_features_one_by_one():
    # a feature added to the parameter registry later is not claimed by these two by default
    import inspect

    from impls.fused import FusedImpl
    from impls.trtllm import TrtllmImpl
    for cls in (FusedImpl, TrtllmImpl):
        src = inspect.getsource(cls)
        assert "frozenset(FEATURES)" not in src and '"top_p_decay"' in src


def test_stage_provenance_is_checked():
    class Bad:
        name = "bad"
        stages = {"filters": "own", "sorting": "own"}
    with pytest.raises(ValueError, match=r"bad: stages: unknown stage 'sorting'"):
        stage_provenance(Bad())
    Bad.stages = {"filters": "mine"}
    with pytest.raises(ValueError, match=r"bad: stages\['filters'\] = 'mine': must be one of own, adapter, reference"):
        stage_provenance(Bad())
    Bad.stages = {"draw": "own", "validation": "reference"}
    assert list(stage_provenance(Bad())) == ["validation", "draw"]   # pipeline order
    assert list(STAGES)[:2] == ["validation", "logit_bias"]
    # a run_scenario path's own declaration overrides entry by entry, for scenarios only
    Bad.stages = {"draw": "own", "seeds": "adapter"}
    Bad.scenario_stages = {"seeds": "own"}
    assert stage_provenance(Bad()) == {"draw": "own", "seeds": "adapter"}
    assert stage_provenance(Bad(), scenario=True) == {"draw": "own", "seeds": "own"}
    Bad.scenario_stages = {"seeds": "borrowed"}
    with pytest.raises(ValueError, match=r"bad: scenario_stages\['seeds'\] = 'borrowed'"):
        stage_provenance(Bad(), scenario=True)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match=r"unknown implementation 'nope'; known: reference, reference-hf.*"
                                       r"'package.module:Class'"):
        registry.create("nope")
    # a typo gets the close names first
    with pytest.raises(KeyError, match=r"unknown implementation 'vlm'; did you mean 'vllm'\? known: reference"):
        registry.create("vlm")


def test_module_class_spec(tmp_path, monkeypatch):
    (tmp_path / "toy_spec_mod.py").write_text(textwrap.dedent("""
        from impls.reference import Reference
        class Toy(Reference):
            def __init__(self):
                super().__init__(name="toy-spec")
        NOT_CALLABLE = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    impl = registry.create("toy_spec_mod:Toy")
    assert impl.name == "toy-spec" and registry.load_spec("toy_spec_mod:Toy").origin == "toy_spec_mod:Toy"
    with pytest.raises(registry.ImplLoadError, match=r"module 'toy_no_such_mod' does not import"):
        registry.create("toy_no_such_mod:Toy")
    with pytest.raises(registry.ImplLoadError, match=r"toy_spec_mod has no attribute 'Nope'"):
        registry.create("toy_spec_mod:Nope")
    with pytest.raises(registry.ImplLoadError, match=r"NOT_CALLABLE is a int, not a class or callable"):
        registry.create("toy_spec_mod:NOT_CALLABLE")


def _fake_dist(root, name, entry_points: str, modules: dict):
    """A distribution on ``sys.path`` that importlib.metadata finds: ``<name>-1.0.dist-info`` plus modules."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(src))


@pytest.fixture()
def fresh_registry(monkeypatch):
    monkeypatch.setattr(registry, "_CACHE", {})
    yield
    registry._CACHE.clear()


def test_entry_points_are_discovered_and_checked(tmp_path, monkeypatch, fresh_registry):
    _fake_dist(tmp_path, "toy-dist", textwrap.dedent("""
        [sampcheck.impls]
        toy = toy_ep_mod:Toy
        broken = toy_ep_missing:Thing
        reference = toy_ep_mod:Toy
        misnamed = toy_ep_mod:Toy
    """), {"toy_ep_mod": """
        from impls.reference import Reference
        class Toy(Reference):
            def __init__(self):
                super().__init__(name="toy")
    """})
    monkeypatch.syspath_prepend(str(tmp_path))
    by_name = {e.name: e for e in registry.entries()}
    assert by_name["toy"].origin == "entry point toy (toy-dist 1.0)"
    assert registry.create("toy").name == "toy"
    assert "toy" in registry.names("conformance")
    # a broken plug-in is listed with its problem and never hides the others
    assert "toy_ep_missing" in by_name["broken"].problem
    with pytest.raises(registry.ImplLoadError, match=r"'broken' \(entry point broken \(toy-dist 1.0\)\) cannot be "
                                                     r"loaded: toy_ep_missing:Thing: ModuleNotFoundError"):
        registry.create("broken")
    assert "broken" not in registry.names("conformance")
    # a name already taken by a built-in does not shadow it
    assert registry.entry("reference").origin == "impls.reference"
    clash = [e for e in registry.entries() if e.name.startswith("reference [")]
    assert len(clash) == 1 and "already registered (impls.reference)" in clash[0].problem
    # an entry point whose object answers to another name
    with pytest.raises(registry.ImplLoadError, match=r"'misnamed' .*: the object's name is 'toy'"):
        registry.create("misnamed")


def test_cli_runs_a_module_class_spec(tmp_path, monkeypatch, capsys):
    """``--impl package.module:Class`` runs in a worker process that imports the module itself."""
    from harness.cli import main
    (tmp_path / "toy_cli_mod.py").write_text(textwrap.dedent("""
        from impls.reference import Reference
        class Toy(Reference):
            def __init__(self):
                super().__init__(name="toy-cli")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    rc = main(["run", "--impl", "toy_cli_mod:Toy", "--cases", "greedy/argmax-ties-lowest-id", "--out",
               str(tmp_path / "out"), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "toy-cli: 1 pass" in out
    assert (tmp_path / "out" / "workers" / "toy-cli.log").exists()   # it ran isolated, under its own name


def test_a_module_in_the_working_folder_imports(tmp_path, monkeypatch):
    """``--impl mymodule:MyImpl`` from the folder that holds mymodule.py, as ``python -m`` would."""
    import sys
    (tmp_path / "toy_cwd_mod.py").write_text("from impls.reference import Reference\n"
                                             "class Toy(Reference):\n"
                                             "    def __init__(self):\n"
                                             "        super().__init__(name='toy-cwd')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert registry.create("toy_cwd_mod:Toy").name == "toy-cwd"
