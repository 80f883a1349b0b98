"""The whole pipeline at the "tiny" preset (seconds on a CPU): what a run leaves on disk."""
import json

import pytest

import text2grad
from test_report import Page

TASKS = ("summarize", "code", "qa")


@pytest.fixture(scope="module")
def run_all(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    text2grad.main(["--preset", "tiny", "--task", "all", "--seeds", "2", "--out", str(out)])
    return out


def test_showcase_tokens_line_up_with_their_responses(run_all):
    for task in TASKS:
        results = json.loads((run_all / task / "results.json").read_text())
        assert results["showcase"] and results["credit_landing"]["responses"] > 0
        for entry in results["showcase"]:
            for side in (entry["sft"], entry["text2grad"]):
                assert "".join(side["pieces"]) == side["response"]
                assert len(side["critic"]["delta"]) == len(side["reward_model"]["delta"]) == len(side["pieces"])
        for example in results["credit_landing"]["examples"]:
            n = len(example["pieces"])
            assert len(example["critic"]) == n and all(len(c) == n for c in example["change"].values())
            assert set(example["change"]) == set(text2grad.METHODS)


def test_every_run_writes_a_report(run_all):
    for task in TASKS:
        page = Page((run_all / task / "report.html").read_text(encoding="utf-8"))
        assert sorted(page.curves) == sorted(text2grad.METHODS)
    page = Page((run_all / "report.html").read_text(encoding="utf-8"))
    assert sorted(page.curves) == sorted(list(text2grad.METHODS) * len(TASKS))
    responses = {side["response"] for task in TASKS
                 for entry in json.loads((run_all / task / "results.json").read_text())["showcase"]
                 for side in (entry["sft"], entry["text2grad"])}
    coloured = [c for c in page.containers if c["n_spans"]]
    assert all(c["all"] == c["spans"] for c in coloured)
    assert responses <= {c["all"] for c in coloured}
