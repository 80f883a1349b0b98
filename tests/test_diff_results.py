"""experiments/diff_results.py: two runs compared leaf by leaf, against hand-built results.json files."""
import json

import pytest

from experiments import diff_results

RUN = {"task": "qa", "wall_time_s": {"sft": 12.5}, "device": "cpu",
       "methods": {"oracle": {"scores": [0.5, 0.75], "time_s": 3.0, "curves": [[[0, 0.1], [2, 0.4]]]}}}


def write(folder, results):
    (folder / "qa").mkdir(parents=True)
    (folder / "qa" / "results.json").write_text(json.dumps(results))


def test_leaves_are_paths_of_keys_and_indices():
    assert diff_results.leaves({"a": [1, {"b": None}], "c": "x"}) == {("a", 0): 1, ("a", 1, "b"): None, ("c",): "x"}


def test_times_and_device_aside_the_same_run_is_identical(tmp_path, capsys):
    other = json.loads(json.dumps(RUN))
    other["wall_time_s"]["sft"], other["device"], other["methods"]["oracle"]["time_s"] = 99.0, "cuda", 7.0
    write(tmp_path / "a", RUN)
    write(tmp_path / "b", other)
    with pytest.raises(SystemExit) as stop:
        diff_results.main([str(tmp_path / "a"), str(tmp_path / "b")])
    assert stop.value.code == 0 and "0 leaves differ, 0 only in" in capsys.readouterr().out


def test_a_changed_missing_or_new_leaf_is_named_and_fails(tmp_path, capsys):
    other = json.loads(json.dumps(RUN))
    other["methods"]["oracle"]["curves"][0][1][1] = 0.41   # a changed number deep in a curve
    del other["task"]                                      # a leaf only in a
    other["praise"] = "phrase"                             # a leaf only in b
    write(tmp_path / "a", RUN)
    write(tmp_path / "b", other)
    with pytest.raises(SystemExit) as stop:
        diff_results.main([str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert stop.value.code == 1 and "1 leaves differ, 1 only in" in out
    assert "differs: methods/oracle/curves/0/1/1" in out and "task" in out and "praise" in out
