"""sampcheck show (harness/show.py): one case with its prediction, run records and findings."""

import json

import pytest

from harness.cli import main
from harness.show import describe_value, show


def test_values_are_shortened_past_twelve():
    assert describe_value(list(range(14))) == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ... (14 values)]"
    assert describe_value({"token": 1, "probs": [0.25, 0.75]}) == "{token = 1, probs = [0.25, 0.75]}"


def test_a_case_with_its_prediction_records_and_findings(tmp_path):
    rec = {"format": "sampcheck-record", "schema": 2, "engine": {"impl": "toy", "version": "1.0"},
           "cases": {"penalties/logit-bias-duplicate-id": {"status": "fail", "own_code": False,
                                                           "borrowed": ["seeds"], "message": "1 row(s) differ"}}}
    (tmp_path / "toy-1.0.json").write_text(json.dumps(rec))
    (tmp_path / "other-2.json").write_text(json.dumps({**rec, "cases": {"a/b": {"status": "pass"}}}))
    (tmp_path / "broken.json").write_text("{not json")
    text = show("penalties/logit-bias-duplicate-id", tmp_path)
    lines = text.splitlines()
    assert lines[0].startswith("penalties/logit-bias-duplicate-id — A token id listed twice in logit_bias")
    assert "    row 0: logits = [0, 1.5, 1], logit_bias = [[0, -1], [0, 2]], temperature = 0" in lines
    assert "      expect: {mode = greedy, token = 1, rewritten_logits = [1, 1.5, 1]}" in lines
    # the default profile sums the duplicate bias: [0 - 1 + 2, 1.5, 1] -> argmax 1, greedy
    assert "  main:0: token 1, mode greedy, finish none" in lines
    assert "  toy 1.0 (toy-1.0.json): fail, borrowed: seeds — 1 row(s) differ" in lines
    assert "  other-2.json: not in this record (1 cases)" in lines
    assert not any("broken.json" in ln for ln in lines)
    assert any(ln.startswith("  hf-457-bias-on-token-zero-rejected (transformers <5.0)") for ln in lines)


def test_a_typo_or_a_category_is_a_clear_error(capsys):
    assert main(["show", "filters/top-k-tow-statistical"]) == 2
    assert "case 'filters/top-k-tow-statistical' matches no case (did you mean 'filters/top-k-two-statistical'" \
        in capsys.readouterr().err
    assert main(["show", "filters"]) == 2
    assert "names" in capsys.readouterr().err
    with pytest.raises(ValueError, match="give one case id, not a pattern"):
        show("filters/*")


def test_a_records_folder_that_is_not_one_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=f"--records {tmp_path / 'nope'}: not a folder"):
        show("penalties/logit-bias-duplicate-id", tmp_path / "nope")
