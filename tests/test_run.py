"""The whole pipeline at the "tiny" preset (seconds on a CPU): what a run leaves on disk.

Every run here is pinned to --device cpu: the tests compare runs number for number (in one process;
a resumed run, in a new one, to float32 rounding: see close), and only the CPU repeats itself
(CUDA's attention and embedding backward passes are not deterministic, and bf16 autocast is on
there). tests/test_cuda.py runs the pipeline on a GPU."""
import copy
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy
import pytest

import guards
import reward
import text2grad
from data.annotations import read_jsonl
from experiments import optimisers, ppo_runs, protocol, report, revise, reward_grid
from experiments.run_folder import read_run
from test_report import Page

pytestmark = pytest.mark.slow  # every test here runs the lab's pipeline, or reads the run it made

TASKS = ("summarize", "code", "qa")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def run_all(tmp_path_factory):
    """The README's commands at the tiny preset: the run, then the report."""
    out = tmp_path_factory.mktemp("runs")
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "all", "--seeds", "2", "--out", str(out)])
    report.main(["--out", str(out)])
    return out


def test_showcase_tokens_line_up_with_their_responses(run_all):
    for task in TASKS:
        results = json.loads((run_all / task / "summary.json").read_text())
        assert results["showcase"]
        for entry in results["showcase"]:
            for side in (entry["sft"], entry["text2grad"]):
                assert "".join(side["pieces"]) == side["response"]
                assert len(side["critic"]["delta"]) == len(side["reward_model"]["delta"]) == len(side["pieces"])


def test_sft_curve(run_all):
    for task in TASKS:
        results = json.loads((run_all / task / "results.json").read_text())
        # tiny: 20 SFT steps, a point every 10; the last point is the policy the run evaluates
        curve = results["sft_training"]["curve"]
        assert [step for step, _ in curve] == [10, 20]
        assert curve[-1][1] == {k: v for k, v in results["sft"]["validation"].items() if k in curve[-1][1]}
        assert (run_all / task / "sft_curve.svg").read_text().startswith("<svg")
        # tiny: 10 pretraining steps, then SFT starts from the saved base model
        assert [step for step, _ in results["pretraining"]["curve"]] == [10]
        assert (run_all / task / "base.pt").exists() and results["wall_time_s"]["pretrain"] > 0


def test_reward_model_seeds(run_all, tmp_path):
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "qa", "--seeds", "2", "--reward-seeds", "2", "--out", str(tmp_path)])
    report.main(["--out", str(tmp_path)])
    results = json.loads((tmp_path / "qa" / "summary.json").read_text())
    one_seed = json.loads((run_all / "qa" / "results.json").read_text())
    rm = results["reward_model"]
    def metrics(m):
        return {k: v for k, v in m.items() if k not in ("seeds", "time_s")}
    for name in ("cot", "no_cot"):  # two seeds each; the first is the model PPO uses, as in a one-seed run
        assert len(rm[name]["seeds"]["positive_f1"]) == len(rm[name]["seeds"]["negative_f1"]) == 2
        assert metrics(rm[name]) == metrics(one_seed["reward_model"][name])
    assert len(rm["scalar"]["seeds"]["score_correlation"]) == 2  # the scalar model has its seeds too
    assert metrics(rm["scalar"]) == metrics(one_seed["reward_model"]["scalar"])
    for metric in ("positive_f1", "negative_f1"):
        by_hand = [a - b for a, b in zip(rm["cot"]["seeds"][metric], rm["no_cot"]["seeds"][metric])]
        assert results["reward_paired"][metric]["per_seed"] == pytest.approx(by_hand)
    # PPO seed 0 reads reward seed 0, as in the one-seed run; PPO seed 1 reads reward seed 1
    assert results["methods"]["text2grad"]["reward_seeds"] == [0, 1]
    assert results["methods"]["text2grad"]["scores"][0] == one_seed["methods"]["text2grad"]["scores"][0]
    assert results["paired"]["text2grad - ppo_scalar"]["units"] == 2


def test_a_reward_model_setting_chosen_on_validation_trains_it_again_on_resume(run_all, tmp_path, monkeypatch):
    preset = {"reward_lr": 2e-3, "reward_steps": 5, "reward": {"cot": (1e-3, 7)}}
    assert protocol.reward_settings(preset, "cot") == protocol.reward_settings(preset, "no_cot") == (1e-3, 7)
    assert protocol.reward_settings(preset, "scalar") == (2e-3, 5)
    assert protocol.reward_stage_names(preset, "cot", [3, 4]) == {3: "reward/cot/lr0.001_steps7",
                                                                   4: "reward/cot/lr0.001_steps7/4"}
    assert protocol.reward_stage_names(preset, "scalar", [3, 4]) == {3: "reward/scalar", 4: "reward/scalar/4"}
    shutil.copytree(run_all / "qa", tmp_path / "qa")  # a finished run, made before the choice
    before = json.loads((tmp_path / "qa" / "progress.json").read_text())["done"]
    monkeypatch.setitem(protocol.REWARD_CHOICES, "tiny", {"qa": {"scalar": (1e-3, 3)}})
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "qa", "--seeds", "2", "--out", str(tmp_path),
                   "--resume"])
    after = json.loads((tmp_path / "qa" / "progress.json").read_text())["done"]
    assert after["reward/cot"] == before["reward/cot"]  # not chosen: loaded, not trained again
    assert "reward/scalar/lr0.001_steps3" in after and "reward/scalar/lr0.001_steps3" not in before
    results = json.loads((tmp_path / "qa" / "results.json").read_text())
    chosen = after["reward/scalar/lr0.001_steps3"]["value"]["score_correlation"]
    assert results["reward_model"]["scalar"]["score_correlation"] == chosen  # the table reads the chosen model
    # the PPO runs that read the scalar model ran again (and were tested again); the others did not
    new = sorted(set(after) - set(before))
    assert new == sorted(["reward/scalar/lr0.001_steps3", "reward/scalar/lr0.001_steps3/1"][:1 + ("reward/scalar/1" in before)]
                         + [f"ppo/ppo_scalar/lr0.001_steps3/lambda{lam}/0" for lam in (0.0, 0.95)]
                         + ["ppo/ppo_scalar/lr0.001_steps3/lambda" + str(results["methods"]["ppo_scalar"]["lambda"]) + "/1"]
                         + ["test/ppo_scalar/lr0.001_steps3/0", "test/ppo_scalar/lr0.001_steps3/1"])
    scores = [after[f"test/ppo_scalar/lr0.001_steps3/{seed}"]["value"]["f1"] for seed in (0, 1)]
    assert results["methods"]["ppo_scalar"]["scores"] == scores


def test_a_run_pays_praise_as_its_task_does_by_default(run_all):
    for task in TASKS:
        assert json.loads((run_all / task / "results.json").read_text())["praise"] == guards.PRAISE[task]
        assert read_run(str(run_all / task), "cpu").preset["ppo"]["praise"] == guards.PRAISE[task]


def test_praise_reaches_every_ppo_run_and_resume_checks_it(tmp_path, monkeypatch):
    seen, shaped = [], text2grad.guards.shaped_scores
    def spy(deltas, responses, mask, ended, shaping):  # every span reward's scores pass through here
        seen.append(shaping.praise)
        return shaped(deltas, responses, mask, ended, shaping)
    monkeypatch.setattr(text2grad.guards, "shaped_scores", spy)
    other = {"token": "phrase", "phrase": "token"}[guards.PRAISE["code"]]  # not the task's default
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "code", "--praise", other, "--out", str(tmp_path)])
    assert json.loads((tmp_path / "code" / "results.json").read_text())["praise"] == other
    assert seen and set(seen) == {other}
    assert read_run(str(tmp_path / "code"), "cpu").preset["ppo"]["praise"] == other  # what the studies re-run with
    with pytest.raises(SystemExit):  # resuming with the default would mix two kinds of PPO run
        protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "code", "--out", str(tmp_path), "--resume"])


def test_every_run_writes_a_report(run_all):
    metrics = {task: set(json.loads((run_all / task / "results.json").read_text())["sft"]["test"]) for task in TASKS}
    for task in TASKS:
        page = Page((run_all / task / "report.html").read_text(encoding="utf-8"))
        # three charts: the SFT curve (one line per task metric), the PPO validation metric and the
        # value head's explained variance
        sft_lines = [c for c in page.curves if c not in text2grad.METHODS]
        assert sorted(c for c in page.curves if c in text2grad.METHODS) == sorted(list(text2grad.METHODS) * 2)
        assert set(sft_lines) <= metrics[task] and text2grad.get_task(task).PRIMARY in sft_lines
    page = Page((run_all / "report.html").read_text(encoding="utf-8"))
    assert sorted(c for c in page.curves if c in text2grad.METHODS) == sorted(list(text2grad.METHODS) * 2 * len(TASKS))
    responses = {side["response"] for task in TASKS
                 for entry in json.loads((run_all / task / "results.json").read_text())["showcase"]
                 for side in (entry["sft"], entry["text2grad"])}
    coloured = [c for c in page.containers if c["n_spans"]]
    assert all(c["all"] == c["spans"] for c in coloured)
    assert responses - {""} <= {c["all"] for c in coloured}  # an empty response has no token to colour


# ---------------------------------------------------------------------------------------------
# Determinism, interruption and --resume

RUN = [sys.executable, "-m", "experiments.protocol", "--preset", "tiny", "--device", "cpu", "--task", "summarize", "--seeds", "2"]


def metrics(path):
    """results.json without the wall-clock times, which differ between any two runs, and where it came
    from: the command that started it (its --out differs), the commits its stages ran at (an edit
    between the two runs changes them), the machine and the units' record (where and how long)."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    if k not in ("wall_time_s", "time_s", "command", "commits", "machine", "units")}
        return [strip(v) for v in value] if isinstance(value, list) else value
    return strip(json.loads(path.read_text()))


def close(a, b, rel=1e-4, abs_=1e-6):
    """a == b, except that floats need only agree to rel (or abs_ near zero). A resumed stage runs
    in a new process, where MKL's float32 matrix products may round a sum differently, by a unit in
    the last place (seen once in CI, not here): the same computation, not a bit-exact one."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel, abs_) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rel, abs_) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and float in (type(a), type(b)):
        return a == pytest.approx(b, rel=rel, abs=abs_)
    return a == b


def differences(a, b, path="", rel=1e-4, abs_=1e-6):
    """Where close(a, b) fails: the paths of the leaves (or key sets) that differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}/{k}", rel, abs_)]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for j, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{j}]", rel, abs_)]
    return [] if close(a, b, rel, abs_) else [f"{path}: {a!r} against {b!r}"]


def test_close_tells_rounding_from_a_different_run():
    assert close({"loss": [5.069726085662841, 3], "n": "x"}, {"loss": [5.0697262525558475, 3], "n": "x"})
    assert not close({"loss": [5.0697, 3]}, {"loss": [5.0707, 3]})       # 2e-4 apart
    assert not close({"loss": [5.0, 3]}, {"loss": [5.0, 4]})             # an integer differs
    assert not close({"loss": [5.0]}, {"loss": [5.0, 1.0]})              # a point missing
    assert not close({"a": 1.0}, {"b": 1.0})
    assert differences({"x": [1.0, 2.0], "y": 3}, {"x": [1.0, 2.5], "y": 3}) == ["/x[1]: 2.0 against 2.5"]


def finished(out):
    """The stages progress.json marks finished (none before it is written)."""
    try:
        return json.loads((out / "summarize" / "progress.json").read_text())["done"]
    except (OSError, ValueError):
        return {}


def stop_after(out, stage, sig):
    """Start a fresh (or resumed) run, send sig once `stage` is marked finished (so the next stage
    is under way); returns the exit status and stderr."""
    process = subprocess.Popen(RUN + ["--out", str(out)] + (["--resume"] if (out / "summarize").exists() else []),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.time() + 120
    while stage not in finished(out) and process.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    process.send_signal(sig)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_two_runs_with_one_seed_agree(run_all, tmp_path):
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "summarize", "--seeds", "2", "--out", str(tmp_path)])
    assert metrics(tmp_path / "summarize" / "results.json") == metrics(run_all / "summarize" / "results.json")


def test_killed_or_interrupted_run_resumes_to_the_same_numbers(run_all, tmp_path):
    # SIGKILL as SFT and the reward models get under way, ctrl-C once the reward models are done (one
    # line, exit 130), SIGKILL again in a PPO run, resuming each time: a stopped stage runs again from
    # its start, and the numbers are a fresh run's
    for stage, sig in (("base", signal.SIGKILL), ("evaluate", signal.SIGKILL), ("reward/scalar", signal.SIGINT),
                       ("ppo/text2grad/lambda0.0/0", signal.SIGKILL)):
        code, err = stop_after(tmp_path, stage, sig)
        assert not (tmp_path / "summarize" / "results.json").exists()
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL, f"the run ended before {stage} finished"
            continue
        assert code == 130 and "--resume" in err and "Traceback" not in err, err
        done = json.loads((tmp_path / "summarize" / "progress.json").read_text())["done"]
        assert "reward/scalar" in done and "showcase" not in done
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "summarize", "--seeds", "2", "--out", str(tmp_path), "--resume"])
    got, want = metrics(tmp_path / "summarize" / "results.json"), metrics(run_all / "summarize" / "results.json")
    assert close(got, want), differences(got, want)


def test_resume_with_more_seeds_adds_their_runs(run_all, tmp_path):
    shutil.copytree(run_all / "summarize", tmp_path / "summarize")
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "summarize", "--seeds", "3", "--out", str(tmp_path), "--resume"])
    before = json.loads((run_all / "summarize" / "results.json").read_text())
    after = json.loads((tmp_path / "summarize" / "results.json").read_text())
    for name in text2grad.METHODS:
        assert len(after["methods"][name]["scores"]) == 3
        assert after["methods"][name]["scores"][:2] == before["methods"][name]["scores"]  # the first two, reused
        assert after["methods"][name]["lambda"] == before["methods"][name]["lambda"]
    assert not list((tmp_path / "summarize").glob("ppo_*_lambda*_seed*.pt"))  # every run's policy evaluated, removed


def test_reward_grid_chooses_each_model_on_validation_alone(run_all, tmp_path):
    shutil.copytree(run_all / "code", tmp_path / "code")
    (tmp_path / "code" / "annotations_test.jsonl").unlink()  # the test annotations are never opened
    reward_grid.main(["--out", str(tmp_path / "code"), "--device", "cpu", "--lrs", "1e-3", "3e-3", "--steps", "2", "3"])
    results = json.loads((tmp_path / "code" / "reward_grid.json").read_text())
    assert set(results) == {"cot", "scalar", "units"}  # units: where each grid point ran, and how long
    for name, entry in ((name, results[name]) for name in ("cot", "scalar")):
        grid = entry["grid"]
        assert [(g["lr"], g["steps"]) for g in grid] == [(1e-3, 2), (1e-3, 3), (3e-3, 2), (3e-3, 3)]
        top = max(g["validation"] for g in grid)
        assert entry["chosen"] == next({"lr": g["lr"], "steps": g["steps"]} for g in grid if g["validation"] == top)
    # the scalar model's measure, by hand: retrain one grid point, correlate its scores with its targets
    run = read_run(str(tmp_path / "code"), "cpu")
    records = read_jsonl(str(tmp_path / "code" / "annotations_validation.jsonl"), check=None)
    train = read_jsonl(str(tmp_path / "code" / "annotations_train.jsonl"), check=None)
    _, train_items, _ = reward.encode_records(run.tokenizer, train, run.policy.config.block_size)
    kept, items, _ = reward.encode_records(run.tokenizer, records, run.policy.config.block_size)
    shaping = ppo_runs.configs(run.preset["ppo"])[1]
    model = reward.RewardModel(copy.deepcopy(run.policy), "scalar", False, shaping)
    reward.train_reward_model(model, run.tokenizer, train_items, 3, run.preset["batch_size"], 3e-3, "cpu", run.seed)
    scores = model.predict(run.tokenizer, [r["prompt"] for r in kept], [r["response"] for r in kept])
    expected = numpy.corrcoef(scores, reward.scalar_targets(items, shaping).numpy())[0, 1]
    assert results["scalar"]["grid"][3]["validation"] == pytest.approx(expected, abs=1e-4)
    # a stopped grid resumes: every finished point is read back from reward_grid/, none trained again
    next((tmp_path / "code" / "reward_grid").glob("*/scalar_lr0.003_steps3_seed0.json")).unlink()  # stopped there
    trained = []
    real = reward_grid.grid_point
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(reward_grid, "grid_point", lambda *a: trained.append(a[-3:-1]) or real(*a))
    try:
        reward_grid.main(["--out", str(tmp_path / "code"), "--device", "cpu", "--lrs", "1e-3", "3e-3", "--steps", "2",
                          "3"])
    finally:
        monkeypatch.undo()
    assert trained == [(3e-3, 3)]
    untimed = lambda r: {n: {**e, "grid": [{k: v for k, v in g.items() if k != "time_s"} for g in e["grid"]]}
                         for n, e in r.items() if n != "units"}
    assert untimed(json.loads((tmp_path / "code" / "reward_grid.json").read_text())) == untimed(results)
    code = subprocess.run([sys.executable, "-m", "experiments.reward_grid", "--out", str(tmp_path / "nothing")],
                          capture_output=True, text=True, cwd=ROOT)
    assert code.returncode != 0 and "Traceback" not in code.stderr and "experiments.protocol" in code.stderr


def test_own_annotations_give_each_reward_seed_its_draw_and_a_record(run_all, tmp_path, capsys):
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "code", "--seeds", "2", "--reward-seeds", "2",
                   "--own-annotations", "--out", str(tmp_path)])
    folder = tmp_path / "code"
    first = read_jsonl(str(folder / "annotations_train.jsonl"), check=None)
    draw = read_jsonl(str(folder / "draw1_train.jsonl"), check=None)
    # the same annotated prompts, answers sampled afresh, each annotated by the critic
    assert [r["prompt"] for r in draw] == [r["prompt"] for r in first]
    assert [r["response"] for r in draw] != [r["response"] for r in first]
    task = protocol.get_task("code")
    example = {e.prompt: e for e in protocol.experiment_splits(task, protocol.PRESETS["tiny"], 0)[1]}
    for r in draw[:5]:
        assert {k: r[k] for k in ("textual_feedback", "good_spans", "poor_spans")} == \
            {k: v for k, v in task.critique(example[r["prompt"]], r["response"]).items()
             if k in ("textual_feedback", "good_spans", "poor_spans")}
    # reward seed 0 trained on the first draw, as without the flag: its models are the one-seed run's
    one_seed = json.loads((run_all / "code" / "results.json").read_text())
    results = json.loads((folder / "results.json").read_text())
    assert results["reward_model"]["cot"]["positive_f1"] == one_seed["reward_model"]["cot"]["positive_f1"]
    assert results["own_annotations"] and results["methods"]["text2grad"]["reward_seeds"] == [0, 1]
    # the like-for-like prompt-only rows: as many critic calls as the draw each seed's model read
    from experiments import revise
    revise.main(["--out", str(folder), "--target", "best", "--device", "cpu", "--rounds", "1"])
    best = json.loads((folder / "revise_best.json").read_text())
    assert [s["critic_calls"] for s in best["seeds"]] == [len(first), len(draw)] and best["target"] == "best"
    # choosing the steps: one critique of each validation answer per step count tried
    assert best["validation_critic_calls"] == len(best["validation"]) * protocol.PRESETS["tiny"]["validation"]
    # the record keeps what the tables read, and rebuilds them with no model
    report.main(["--out", str(folder), "--record", str(tmp_path / "r.json")])
    record = json.loads((tmp_path / "r.json").read_text())
    assert "showcase" not in record["results"] and record["revise_best"] == best and record["revise"] is None
    assert record["results"]["command"].startswith("python -m experiments.protocol") and record["commits"]
    assert record["results"]["config"]["ppo"]["updates"] == protocol.PRESETS["tiny"]["ppo"]["updates"]
    capsys.readouterr()
    report.main(["--from", str(tmp_path / "r.json")])
    printed = capsys.readouterr().out
    # the family: COMPARISONS and the two like-for-like rows; Text2Grad's test score, averaged here
    assert "the family of 10 contrasts" in printed and "Holm" in printed
    scores = results["methods"]["text2grad"]["scores"]
    assert f" | {sum(scores) / 2:.3f} ± " in printed.split("| code (seed 0) |")[1].split("\n")[0]


def test_revise_runs_the_prompt_only_rows_with_their_cost(run_all, tmp_path):
    shutil.copytree(run_all / "code", tmp_path / "code")
    # a second seed on the finished run (every stage loaded), then revise at the preset's steps
    protocol.main(["--preset", "tiny", "--device", "cpu", "--task", "code", "--seeds", "2", "--out", str(tmp_path),
                   "--resume"])
    revise.main(["--out", str(tmp_path / "code"), "--device", "cpu"])
    out = json.loads((tmp_path / "code" / "revise.json").read_text())
    assert str(out["steps"]) == max(out["validation"], key=out["validation"].get) and set(out["validation"]) == {"2", "3"}
    assert [s["seed"] for s in out["seeds"]] == [0, 1]
    rows = out["seeds"][0]["rows"]
    # model calls per answer: the answer, then per round a revision (and, learned, the reward model's critique)
    calls = {"revise_first": 1, "revise_critic_1": 2, "revise_critic_2": 3, "revise_learned_1": 3, "revise_learned_2": 5,
             "text2grad_first_seed": 1, "text2grad_revised_critic_1": 2, "text2grad_revised_learned_1": 3}
    assert {name: row["calls"] for name, row in rows.items()} == calls
    assert set(out["seeds"][1]["rows"]) == {n for n in calls if not n.startswith("text2grad")}
    assert all(0 <= row["score"] <= 1 for row in rows.values())
    assert rows["revise_learned_1"]["tokens"] > rows["revise_critic_1"]["tokens"] > rows["revise_first"]["tokens"]
    code = subprocess.run([sys.executable, "-m", "experiments.revise", "--out", str(tmp_path / "nothing")],
                          capture_output=True, text=True, cwd=ROOT)
    assert code.returncode != 0 and "Traceback" not in code.stderr


def test_grpo_runs_beside_ppo_on_the_same_folder(run_all, tmp_path, capsys):
    shutil.copytree(run_all / "code", tmp_path / "code")
    kept = ("results.json", "samples_text2grad.jsonl", "ppo_text2grad.pt", "ppo_oracle_scalar.pt")
    before = [(tmp_path / "code" / name).read_bytes() for name in kept]
    flags = ["--preset", "tiny", "--device", "cpu", "--task", "code", "--seeds", "2", "--out", str(tmp_path), "--resume"]
    protocol.main(flags + ["--advantage", "grpo"])
    protocol.main(flags + ["--advantage", "grpo", "--per", "response"])
    assert [(tmp_path / "code" / name).read_bytes() for name in kept] == before  # PPO's files untouched
    done = json.loads((tmp_path / "code" / "progress.json").read_text())["done"]
    for variant in ("grpo", "grpo_sum"):
        results = json.loads((tmp_path / "code" / f"results_{variant}.json").read_text())
        assert results["per"] == ("token" if variant == "grpo" else "response")
        for name, m in results["methods"].items():
            if name == "sft":
                continue
            grid = results["group_grid"][name]
            assert [int(g) for g in grid] == list(protocol.PRESETS["tiny"]["groups"]) and m["lambda"] is None
            assert m["group"] == int(max(grid, key=grid.get)) and len(m["scores"]) == 2
            assert all(math.isnan(ev) for ev in m["explained_variance"])  # no value head read
            shared = "grpo" if text2grad.METHODS[name][1] == "last" else variant  # one run, whatever per
            assert f"{shared}/ppo/{name}/group{m['group']}/1" in done and f"{shared}/test/{name}/0" in done
    capsys.readouterr()
    optimisers.main(["--out", str(tmp_path / "code")])
    printed = capsys.readouterr().out
    assert "GRPO - PPO" in printed and "text2grad summed - text2grad_last" in printed
    # a grid changed on resume: the new choice's runs are tested (seed 0's policy saved again), not the old test
    # read back; a choice whose policies are gone is refused in one line
    saved = {name: (tmp_path / "code" / f"ppo_{name}_grpo.pt").read_bytes() for name in text2grad.METHODS}
    tiny = protocol.PRESETS["tiny"]
    grid = tiny["groups"]
    try:
        tiny["groups"] = (8,)
        one_seed = [f if f != "2" else "1" for f in flags]  # seed 0 alone: its grid run is its test's policy
        protocol.main(one_seed + ["--advantage", "grpo"])
        again = json.loads((tmp_path / "code" / "results_grpo.json").read_text())
        for name in text2grad.METHODS:
            assert again["methods"][name]["group"] == 8
            assert (tmp_path / "code" / f"ppo_{name}_grpo.pt").read_bytes() != saved[name]
        tiny["groups"] = (2,)
        with pytest.raises(SystemExit):
            protocol.main(one_seed + ["--advantage", "grpo"])
        assert "is gone" in capsys.readouterr().err
    finally:
        tiny["groups"] = grid
    code = subprocess.run([sys.executable, "-m", "experiments.protocol", "--per", "response", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert code.returncode != 0 and "Traceback" not in code.stderr and "--advantage grpo" in code.stderr


def test_the_first_look_is_the_protocols_run_at_each_chosen_lambda(run_all, capsys, tmp_path):
    """python text2grad.py at the tiny preset's sizes, against the lab's run of the same preset and
    seed: two code paths (one script, stages with checkpoints and resume) that must train the same
    models, so each method's validation curve equals the lab's run at that lambda, point by point."""
    tiny = protocol.PRESETS["tiny"]
    sizes = {k: tiny[k] for k in ("train", "annotated", "demonstrations", "validation", "test", "vocab_size",
                                  "pretrain_steps", "sft_steps", "batch_size", "lr", "samples_per_prompt",
                                  "reward_steps", "reward_lr", "eval_every")}
    sizes.update(tiny["model"], updates=tiny["ppo"]["updates"], ppo_batch_size=tiny["ppo"]["batch_size"],
                 minibatch_size=tiny["ppo"]["minibatch_size"], ppo_lr=tiny["ppo"]["lr"])
    argv = [a for k, v in sizes.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    table, landed = text2grad.main(argv + ["--task", "summarize", "--device", "cpu", "--methods", "all",
                                           "--figure", str(tmp_path / "look.svg")])
    printed = capsys.readouterr().out
    done = json.loads((run_all / "summarize" / "progress.json").read_text())["done"]
    sft = json.loads((run_all / "summarize" / "results.json").read_text())["sft"]["test"]
    assert table["sft"]["test"] == (sft["rougeL"], sft["no_plan"])
    for method, lam in text2grad.LAMBDAS["summarize"].items():
        lab = done[f"ppo/{method}/lambda{lam}/0"]["value"]["curve"]
        assert table[method]["lambda"] == lam
        assert [validation for _, validation, _, _ in table[method]["curve"]] == [point[1] for point in lab]
        assert method in printed
    # where the first update moved log pi: one line per method, its agreement between -1 and 1
    for m in text2grad.METHODS:
        agreement = landed[m]["agreement"]
        assert -1 <= agreement <= 1 and re.search(rf"^{m} +{agreement:.2f} ", printed, re.M)
    # the figure: one curve and one legend swatch per method, dashed where the reward lands on the last
    # token; the curves' highest score drawn at y = 40 and the lowest at y = 250 (pixels); then one
    # row of tokens for the critic's delta and one per method
    svg = (tmp_path / "look.svg").read_text()
    lines = re.findall(r'<polyline fill="none" stroke="(#\w+)" stroke-width="2"( stroke-dasharray="6 4")? points="([^"]+)"', svg)
    assert len(lines) == 2 * len(text2grad.METHODS) and svg.endswith("</svg>\n")
    curves = [line for line in lines if len(line[2].split()) == len(table["oracle"]["curve"])]
    assert [bool(dash) for _, dash, _ in curves] == [where == "last" for _, where in text2grad.METHODS.values()]
    ys = [int(point.split(",")[1]) for _, _, points in curves for point in points.split()]
    scores = [test for method in text2grad.METHODS for _, _, test, _ in table[method]["curve"]]
    if max(scores) > min(scores):
        assert min(ys) == 40 and max(ys) == 250
    for label in ["critic's delta", *text2grad.METHODS]:
        assert f">{label}</text>" in svg.replace("&#x27;", "'")
