"""The whole pipeline at the "tiny" preset (seconds on a CPU): what a run leaves on disk."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import text2grad
import value
from test_report import Page

TASKS = ("summarize", "code", "qa")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        # two charts: the validation metric and the value head's explained variance
        assert sorted(page.curves) == sorted(list(text2grad.METHODS) * 2)
    page = Page((run_all / "report.html").read_text(encoding="utf-8"))
    assert sorted(page.curves) == sorted(list(text2grad.METHODS) * 2 * len(TASKS))
    responses = {side["response"] for task in TASKS
                 for entry in json.loads((run_all / task / "results.json").read_text())["showcase"]
                 for side in (entry["sft"], entry["text2grad"])}
    coloured = [c for c in page.containers if c["n_spans"]]
    assert all(c["all"] == c["spans"] for c in coloured)
    assert responses - {""} <= {c["all"] for c in coloured}  # an empty response has no token to colour


# ---------------------------------------------------------------------------------------------
# Determinism, interruption and --resume

RUN = [sys.executable, os.path.join(ROOT, "text2grad.py"), "--preset", "tiny", "--task", "summarize", "--seeds", "2"]


def metrics(path):
    """results.json without the wall-clock times, which differ between any two runs."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("wall_time_s", "time_s")}
        return [strip(v) for v in value] if isinstance(value, list) else value
    return strip(json.loads(path.read_text()))


def stop_when(out, snapshot, sig):
    """Start a fresh (or resumed) run, send sig once `snapshot` exists in out; returns the exit status."""
    process = subprocess.Popen(RUN + ["--out", str(out), "--checkpoint-every", "0"] + (["--resume"] if (out / "summarize").exists() else []),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "summarize" / snapshot).exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    process.send_signal(sig)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_two_runs_with_one_seed_agree(run_all, tmp_path):
    text2grad.main(["--preset", "tiny", "--task", "summarize", "--seeds", "2", "--out", str(tmp_path)])
    assert metrics(tmp_path / "summarize" / "results.json") == metrics(run_all / "summarize" / "results.json")


@pytest.mark.slow
def test_killed_and_resumed_run_gives_the_same_numbers(run_all, tmp_path):
    # SIGKILL in the middle of SFT, of a reward model and of a PPO run, resuming each time
    for snapshot in ("sft.partial.pt", "reward_cot.partial.pt", "ppo_text2grad_lambda0.95_0.partial.pt"):
        code, _ = stop_when(tmp_path, snapshot, signal.SIGKILL)
        assert code == -signal.SIGKILL, f"the run ended before {snapshot} appeared"
        assert not (tmp_path / "summarize" / "results.json").exists()
    text2grad.main(["--preset", "tiny", "--task", "summarize", "--seeds", "2", "--out", str(tmp_path), "--resume"])
    assert metrics(tmp_path / "summarize" / "results.json") == metrics(run_all / "summarize" / "results.json")


@pytest.mark.slow
def test_ctrl_c_saves_and_resume_finishes(run_all, tmp_path):
    code, err = stop_when(tmp_path, "ppo_ppo_scalar_lambda0.0_0.partial.pt", signal.SIGINT)
    assert code == 130 and "--resume" in err and "Traceback" not in err
    progress = json.loads((tmp_path / "summarize" / "progress.json").read_text())
    assert "reward/scalar" in progress["done"] and "showcase" not in progress["done"]
    assert not (tmp_path / "summarize" / "results.json").exists()
    text2grad.main(["--preset", "tiny", "--task", "summarize", "--seeds", "2", "--out", str(tmp_path), "--resume"])
    assert metrics(tmp_path / "summarize" / "results.json") == metrics(run_all / "summarize" / "results.json")


def test_resume_with_more_seeds_adds_their_runs(run_all, tmp_path):
    shutil.copytree(run_all / "summarize", tmp_path / "summarize")
    text2grad.main(["--preset", "tiny", "--task", "summarize", "--seeds", "3", "--out", str(tmp_path), "--resume"])
    before = json.loads((run_all / "summarize" / "results.json").read_text())
    after = json.loads((tmp_path / "summarize" / "results.json").read_text())
    for name in text2grad.METHODS:
        assert len(after["methods"][name]["scores"]) == 3
        assert after["methods"][name]["scores"][:2] == before["methods"][name]["scores"]  # the first two, reused
        assert after["methods"][name]["lambda"] == before["methods"][name]["lambda"]
    assert not list((tmp_path / "summarize").glob("ppo_*_lambda*_seed*.pt"))  # every run's policy evaluated, removed


def test_value_command_compares_the_settings_on_a_finished_run(run_all, tmp_path):
    shutil.copytree(run_all / "summarize", tmp_path / "summarize")
    value.main(["--out", str(tmp_path / "summarize")])
    results = json.loads((tmp_path / "summarize" / "value_settings.json").read_text())
    assert set(results) == {f"{s}/{m}" for s in value.VALUE_SETTINGS for m in ("ppo_scalar", "text2grad")}
    updates = text2grad.PRESETS["tiny"]["ppo"]["updates"]
    for key, entry in results.items():
        assert len(entry["explained_variance"]) == len(entry["explained_variance_mc"]) == updates
        assert bool(entry["warmup"]) == key.startswith("own head, warm-up")  # only that setting warms up
