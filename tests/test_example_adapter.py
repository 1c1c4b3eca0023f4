"""The out-of-tree example adapter (examples/torch-sampler), installed as a package, found by its entry point.

``tox -e py`` installs it (``.ci/run`` with ``CI=true``: a missing install fails these tests;
elsewhere they skip with the command that installs it).
"""

import os

import pytest

from impls import registry

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _entry():
    try:
        return registry.entry("example-torch")
    except KeyError:
        return None


ENTRY = _entry()
if ENTRY is None:
    _why = "the example adapter is not installed: pip install --no-deps -e examples/torch-sampler"
    if IN_CI:
        def test_the_example_adapter_is_installed():
            pytest.fail(_why + " (tox -e py installs it; CI is set, so it must be there)")
    else:
        pytestmark = pytest.mark.skip(reason=_why)


def test_discovered_through_its_entry_point():
    assert ENTRY.origin == "entry point example-torch (sampcheck-example-torch 0.1.0)"
    impl = ENTRY.create()
    assert type(impl).__module__ == "sampcheck_example_torch"
    assert impl.profile.name == "example-torch" and impl.profile.citations["rng"].startswith("sampcheck-example-torch:")
    assert "example-torch" in registry.names("conformance")


def test_passes_the_conformance_kit():
    from harness.conformance import assert_conforms
    assert_conforms("example-torch")          # protocol checks, then the smoke corpus: no fail, no error


def test_seeds_keep_their_high_bits():
    from sampcheck_example_torch import fold_seed
    # seeds that differ only above bit 31, and 2**63 vs 2**63 - 1, stay apart after folding to 32 bits
    assert len({fold_seed(s) for s in (1, 1 + 2 ** 32, 2 ** 63, 2 ** 63 - 1, -1, 2 ** 64 - 1)}) == 5
    assert fold_seed(-1) == fold_seed(2 ** 64 - 1)   # one bit pattern, one seed (SEMANTICS §1.6)


def test_its_corpus_results_appear_in_the_report(tmp_path):
    from harness.run.runner import run
    out = run(["example-torch", "reference"], ["greedy", "seeds", "filters/top-k-two-statistical"], tmp_path,
              progress=False)
    mine = {r["case"]: r["status"] for r in out.doc["results"] if r["impl"] == "example-torch"}
    assert len(mine) == 51 and not {s for s in mine.values()} & {"fail", "error"}   # 20 greedy, 30 seeds, 1
    # a row that sets nothing samples here (greedy_when_unset False): a design difference, cited
    assert mine["greedy/nothing-set-is-greedy"] == "known-diff"
    assert mine["filters/top-k-two-statistical"] == "pass"
    assert out.doc["run"]["impls"]["example-torch"]["stages"]["draw"] == "own"
    html = out.html_path.read_text()
    assert '<th data-impl="example-torch"><code>example-torch</code></th>' in html
    assert "sampcheck-example-torch: plain PyTorch" in html          # its profile in the profile table
