"""The records under results/: every table a committed record rebuilds is the one RESULTS.md shows
(read out of RESULTS.md itself), the folder stays small, a record's contrasts and Holm adjustment
against hand-worked numbers, and bad input ends in one line."""
import glob
import json
import math
import os
import re

import pytest

from experiments import protocol_record as protocol_records, records, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def normalised(line):
    """A markdown table line as compared: bold marks dropped, each cell's spaces collapsed."""
    cells = line.strip().strip("|").split("|")
    return "|".join(re.sub(r"\s+", " ", cell.replace("**", "")).strip() for cell in cells)


def tables_printed(text):
    """The markdown tables in printed text, each a list of its lines."""
    out, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            out.append(current)
            current = []
    return out


def found_in(table, lines):
    """Whether the table's lines stand, in order and contiguous, among lines (both normalised)."""
    table, lines = [normalised(t) for t in table], [normalised(t) for t in lines]
    return any(lines[i:i + len(table)] == table for i, line in enumerate(lines) if line == table[0])


RECORDS = sorted(glob.glob(os.path.join(ROOT, "results", "*.json")))


def test_there_is_a_committed_record():
    assert RECORDS, "results/ holds no record"


@pytest.mark.parametrize("path", RECORDS, ids=os.path.basename)
def test_results_md_shows_the_tables_its_records_rebuild(path, capsys):
    report.main(["--from", path])
    rebuilt = tables_printed(capsys.readouterr().out)
    assert rebuilt, f"{path} rebuilt no table"
    with open(os.path.join(ROOT, "RESULTS.md"), encoding="utf-8") as f:
        shown = [line for line in f.read().splitlines() if line.startswith("|")]
    for table in rebuilt:
        assert found_in(table, shown), (f"RESULTS.md does not show the table {path} rebuilds:\n"
                                        + "\n".join(table))


def test_found_in_can_fail():
    table = ["| a | b |", "| --- | --- |", "| 1 | **0.5** ± 0.1 |"]
    assert found_in(table, ["text", "| a | b |", "| --- | --- |", "| 1 |  0.5 ± 0.1 |"])
    assert not found_in(table, ["| a | b |", "| --- | --- |", "| 1 | 0.6 ± 0.1 |"])
    assert not found_in(table, ["| a | b |", "| --- | --- |"])


def test_the_results_folder_stays_under_its_limit():
    assert sum(os.path.getsize(p) for p in glob.glob(os.path.join(ROOT, "results", "*"))) <= records.LIMIT


def test_write_refuses_a_record_past_the_limit_and_writes_nothing(tmp_path, monkeypatch):
    (tmp_path / "old.json").write_text("x" * 60)
    monkeypatch.setattr(records, "LIMIT", 100)
    with pytest.raises(ValueError, match="past"):
        records.write(str(tmp_path / "new.json"), {"kind": "protocol", "numbers": list(range(30))})
    assert sorted(os.listdir(tmp_path)) == ["old.json"]
    records.write(str(tmp_path / "small.json"), {"kind": "protocol"})
    assert json.loads((tmp_path / "small.json").read_text()) == {"kind": "protocol"}


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"), ("{", "not JSON"), ('{"kind": "other"}', "not a record"),
    ("[" * 100000 + "]" * 100000, "nested too deep"),
    ('{"kind": "information", "first_look": {"gold": []}}', "lacks what its tables need"),
    ('{"kind": "protocol", "results": {"methods": {"sft": {"scores": [0.5]}}}}', "lacks what its tables need")])
def test_report_from_a_bad_record_is_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        report.main(["--from", str(path)])
    assert stop.value.code != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err and str(path) in err


@pytest.mark.parametrize("argv", [["--from", ""], ["--from", "results/first_look.json", "--out", "runs"],
                                  ["--from", "results/first_look.json", "--record", "r.json"]])
def test_from_stands_alone_and_needs_a_path(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        report.main(argv)
    assert stop.value.code == 2 and "--from" in capsys.readouterr().err


def protocol_record(a, b):
    """A protocol record with three PPO seeds on three reward models: text2grad scores a, every other
    method b; flat validation curves; the like-for-like rows equal to Text2Grad's."""
    curve = lambda v: [[0, 0.5], [1, v]]
    method = lambda scores: {"lambda": 0.5, "scores": scores, "curves": [curve(v) for v in scores],
                             "tests": [{}] * 3, "reward_seeds": [7, 8, 9]}
    methods = {name: method(a if name == "text2grad" else b) for name in
               ("ppo_scalar", "text2grad_last", "text2grad", "oracle_scalar", "oracle")}
    methods["sft"] = {"scores": [0.4], "curves": [[[0, 0.5]]]}
    results = {"task": "code", "seed": 7, "preset": "default", "methods": methods,
               "reward_model": {"cot": {"seeds": {"positive_f1": [0.9]}}}}
    rows = lambda: {"revise_first": {"score": 0.0, "calls": 1}, "revise_critic_1": {"score": 0.0, "calls": 2}}
    best = {"steps": 10, "text2grad": {"scores": a},
            "seeds": [{"seed": s, "reward_seed": s, "critic_calls": 8, "rows": rows()} for s in (7, 8, 9)]}
    for j, s in enumerate(best["seeds"]):
        s["rows"]["revise_first"]["score"] = a[j] + 0.1 * (j + 1)  # differences 0.1, 0.2, 0.3
        s["rows"]["revise_critic_1"]["score"] = a[j]
    return protocol_records.compact(results, revise_best=best)


def test_the_family_and_its_holm_adjustment_by_hand():
    record = protocol_record([0.7, 0.8, 0.6], [0.6, 0.6, 0.6])
    tables = dict(report.tables(record))
    family = next(lines for title, lines in tables.items() if "family of 10" in title)
    rows = {line.split(" | ")[0].strip("| "): line for line in family[2:]}
    # Text2Grad - any other method: differences 0.1, 0.2, 0.0: mean 0.1, sd 0.1, t = sqrt(3) on 2 df
    t = math.sqrt(3)
    p = 1 - t / math.sqrt(t * t + 2)
    paper = rows["Text2Grad - scalar PPO (the paper's)"].split(" | ")
    assert paper[1].startswith(f"+0.100 ± {4.303 * 0.1 / math.sqrt(3):.3f} (3 units; 2 of 3)")
    assert float(paper[2]) == pytest.approx(p, abs=1e-3)
    # beside it the curve's mean height (points 0.5 and the score): differences 0.05, 0.1, 0.0, uncorrected
    assert paper[4].startswith(f"+0.050 ± {4.303 * 0.05 / math.sqrt(3):.3f} (3 units; 2 of 3)")
    # the first answer: differences 0.1, 0.2, 0.3: t = 0.2 / (0.1 / sqrt 3) on 2 df, the smallest p
    t = 2 * math.sqrt(3)
    first = 1 - t / math.sqrt(t * t + 2)
    revise = rows["prompt-only, like for like, first answer - Text2Grad"].split(" | ")
    assert float(revise[2]) == pytest.approx(first, abs=1e-3)
    assert float(revise[3].strip(" |")) == pytest.approx(10 * first, abs=1e-3)  # the smallest of 10: times 10
    # the contrasts where both sides are b are 0 on every unit: p 1, Holm 1
    tie = rows["the critic's sum - the scalar model (last token)"].split(" | ")
    assert tie[1].startswith("+0.000 ± 0.000") and float(tie[2]) == 1.0 and float(tie[3].strip(" |")) == 1.0
    # each method's test interval is clustered by reward model: one run per model here
    assert any("clustered" in title and "here one run each" in title for title in tables)


def test_runs_sharing_a_reward_model_are_one_unit_in_every_interval():
    record = protocol_record([0.7, 0.8, 0.6], [0.6, 0.6, 0.6])
    for method in record["results"]["methods"].values():
        if "reward_seeds" in method:
            method["reward_seeds"] = [7, 7, 8]
    tables = dict(report.tables(record))
    title, lines = next((t, l) for t, l in tables.items() if "test, 3 PPO seeds" in t)
    # Text2Grad's units: (0.7 + 0.8) / 2 and 0.6; mean 0.675, sd 0.15 / sqrt 2, t_1 = 12.706 over sqrt 2
    half = 12.706 * (0.15 / math.sqrt(2)) / math.sqrt(2)
    assert f"| 0.675 ± {half:.3f} |" in lines[2] and "clustered" in title and "one run each" not in title
    # every run on one reward model: one unit, no interval and no p; Holm runs over the two rows left
    for method in record["results"]["methods"].values():
        if "reward_seeds" in method:
            method["reward_seeds"] = [7, 7, 7]
    tables = dict(report.tables(record))
    title, lines = next((t, l) for t, l in tables.items() if "family of 10" in t)
    paper = next(line for line in lines if line.startswith("| Text2Grad - scalar PPO"))
    assert "+0.100 (1 unit: no interval; 2 of 3) | - | - |" in paper
    # the critic's runs read no reward model: its placement keeps its three seeds as units
    critic = next(line for line in lines if line.startswith("| placement, the critic"))
    assert "(3 units; 0 of 3) | 1.000 | 1.000 |" in critic
    assert "over the 3 with a p" in title  # the critic's placement and the two prompt-only rows
    test_title, test_lines = next((t, l) for t, l in tables.items() if "test, 3 PPO seeds" in t)
    assert "| 0.700 (1 unit) |" in test_lines[2]


def test_a_stage_keeps_the_commit_its_process_started_at(tmp_path, monkeypatch):
    from experiments import runstate
    monkeypatch.setattr(runstate, "commit", lambda: "aaaaaaa")
    progress = runstate.Progress(str(tmp_path), {"task": "code"}, resume=False)
    monkeypatch.setattr(runstate, "commit", lambda: "bbbbbbb")  # a commit made while the run goes on
    progress.finish("data", {}, start=0.0)
    saved = json.loads((tmp_path / "progress.json").read_text())
    assert saved["done"]["data"]["commit"] == "aaaaaaa" and progress.commits() == ["aaaaaaa"]


def test_the_reward_models_fit_and_the_critique_against_its_ablation_by_hand():
    record = protocol_record([0.7, 0.8, 0.6], [0.6, 0.6, 0.6])
    three = lambda values: {k: values for k in ("positive_f1", "negative_f1", "exact_span_match")}
    record["results"]["reward_model"] = {"cot": {"seeds": three([0.9, 0.8, 0.7])},
                                         "no_cot": {"seeds": three([0.7, 0.7, 0.7])}}
    lines = next(lines for title, lines in report.tables(record) if "the reward models' fit" in title)
    half = 4.303 * 0.1 / math.sqrt(3)  # both: sd 0.1 over three seeds
    assert lines[2] == f"| `cot` | 0.800 ± {half:.3f} | 0.800 ± {half:.3f} | 0.800 ± {half:.3f} |"
    assert lines[4].startswith(f"| critique - no critique, paired (uncorrected) | +0.100 ± {half:.3f} (tie) |")
