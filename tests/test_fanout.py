"""experiments/fanout.py: units in sequence are the plain loop, and nothing imports Ray; under Ray
(a local cluster of 2 CPUs) a unit gives what it gives in sequence at the same thread count, a
worker killed mid-unit costs that unit only, a unit's own failure ends the run once with its line,
and Ctrl-C leaves a folder the command's own resume finishes. The files units share (progress.json,
atomic_save's temporary files) are safe for parallel writers.

The Ray tests are marked `ray` (tests/conftest.py leaves them out of a plain `python -m pytest`):
`pip install -r experiments/requirements-ray.txt`, then `python -m pytest -q -m ray`."""
import importlib.util
import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from experiments import first_looks, runstate
from experiments.fanout import Units
from experiments.runstate import Failed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the first look at the size of tests/test_information.py: seconds a seed, every stage run
TINY = dict(task="facts", train=64, annotated=32, demonstrations=320, validation=8, test=8, vocab_size=400,
            n_layer=1, n_head=2, n_embd=32, pretrain_steps=10, sft_steps=30, batch_size=16, reward_steps=5,
            updates=2, ppo_batch_size=8, minibatch_size=8, block_size=512)


def numbers(value, path=()):
    """{path: number} of every int and float in a JSON-like value (tuples as lists), seconds aside."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() if not str(key).endswith("time_s")
                for k, v in numbers(item, path + (key,)).items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in numbers(item, path + (i,)).items()}
    return {path: value} if isinstance(value, (int, float)) and not isinstance(value, bool) else {}


def assert_close(a, b, rel=1e-4):
    """Every number of a and b at the same path, equal within rel of the larger (1e-6 near 0)."""
    na, nb = numbers(a), numbers(b)
    assert na.keys() == nb.keys()
    far = [(p, na[p], nb[p]) for p in na
           if not (math.isnan(na[p]) and math.isnan(nb[p]))
           and abs(na[p] - nb[p]) > max(1e-6, rel * max(abs(na[p]), abs(nb[p])))]
    assert not far, far[:5]


def record(run):
    """What a first look's record holds that a run computes (its table and landing), not where or when."""
    return {"table": json.loads(json.dumps(run["table"])), "landing": run["landing"]}


def on_ray(test):
    """A test of the Ray tier: marked ray, skipped where Ray is not installed."""
    installed = importlib.util.find_spec("ray") is not None
    return pytest.mark.ray(pytest.mark.skipif(not installed, reason="Ray is not installed: pip install -r "
                                              "experiments/requirements-ray.txt")(test))


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------
# In sequence: no Ray

def test_units_in_sequence_run_where_they_are_submitted_and_import_no_ray():
    """(Run again in the ray tier, below, where Ray is installed and so could be imported.)"""
    code = ("import sys; from experiments import first_looks, information, protocol, sweep, reward_grid, "
            "robustness; from experiments.fanout import Units; u = Units(); order = []\n"
            "with u:\n"
            "    a = u.submit('a', lambda x: order.append(x) or x * 2, 3)\n"
            "    b = u.submit('b', lambda x, y=0: order.append(x) or x + y, a, y=1)\n"
            "    assert order == [3, 6] and u.wait({'a': a, 'b': b}) == {'a': 6, 'b': 7}\n"
            "assert [t['unit'] for t in u.record()] == ['a', 'b']\n"
            "assert 'ray' not in sys.modules, 'ray was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


@on_ray
def test_where_ray_is_installed_units_in_sequence_still_import_none():
    test_units_in_sequence_run_where_they_are_submitted_and_import_no_ray()


def test_ray_asked_for_without_ray_installed_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    with pytest.raises(SystemExit) as stop:
        first_looks.main(["--seeds", "0", "--out", str(tmp_path), "--device", "cpu", "--ray"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "pip install -r experiments/requirements-ray.txt" in err
    assert err.count("\n") == 1 and not list(tmp_path.glob("seed*"))


@pytest.mark.parametrize("flags, message", [
    (["--device", "cpu", "--unit-cpus", "0"], "--unit-cpus must be at least 1"),
    (["--device", "cpu", "--unit-gpus", "1.5"], "--unit-gpus must be between 0 and 1"),
    (["--device", "cuda:1", "--ray"], "--ray picks each unit's GPU: --device cuda, not cuda:1")])
def test_unit_resources_no_unit_can_have_are_refused(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        first_looks.main(["--seeds", "0", "--out", str(tmp_path), *flags])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def finish_stages(folder, writer, count):
    progress = runstate.Progress(folder, {"task": "code"}, resume=True)
    for k in range(count):
        progress.finish(f"ppo/{writer}/{k}", {"k": k, "writer": writer}, start=time.time())


def test_progress_keeps_every_stage_parallel_writers_finish(tmp_path):
    # four processes finish 25 stages each in one folder at once; every one of the 100 is kept
    # (without the lock each rewrote the file from its own stages, and most were lost)
    runstate.Progress(str(tmp_path), {"task": "code"}, resume=False)
    writers = [multiprocessing.get_context("spawn").Process(target=finish_stages, args=(str(tmp_path), w, 25))
               for w in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    done = json.loads((tmp_path / "progress.json").read_text())["done"]
    assert sorted(done) == sorted(f"ppo/{w}/{k}" for w in range(4) for k in range(25))
    assert all(done[f"ppo/{w}/{k}"]["value"] == {"k": k, "writer": w} for w in range(4) for k in range(25))
    # a reader sees what the others finished since it last looked
    reader = runstate.Progress(str(tmp_path), {"task": "code"}, resume=True)
    assert "ppo/9/0" not in reader
    finish_stages(str(tmp_path), 9, 1)
    assert reader["ppo/9/0"] == {"k": 0, "writer": 9}
    assert not list(tmp_path.glob("*.tmp"))


def test_a_new_run_forgets_what_an_earlier_one_finished_in_its_folder(tmp_path):
    earlier = runstate.Progress(str(tmp_path), {"task": "code"}, resume=False)
    earlier.finish("data", {}, start=0.0)
    again = runstate.Progress(str(tmp_path), {"task": "code"}, resume=False)
    assert "data" not in again
    again.finish("sft", {}, start=0.0)
    assert list(json.loads((tmp_path / "progress.json").read_text())["done"]) == ["sft"]


def test_an_interrupted_save_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "results.json"
    runstate.atomic_save("whole", str(path))

    class Unsaveable:
        def __reduce__(self):
            raise KeyboardInterrupt  # as Ctrl-C in the middle of torch.save
    with pytest.raises(KeyboardInterrupt):
        runstate.atomic_save(Unsaveable(), str(path))
    assert path.read_text() == "whole" and sorted(os.listdir(tmp_path)) == ["results.json"]


def test_fail_is_an_exit_with_status_2_that_keeps_its_line(capsys):
    with pytest.raises(Failed) as stop:
        runstate.fail("--seeds must be at least 1")
    assert isinstance(stop.value, SystemExit) and stop.value.code == 2
    assert stop.value.message == "--seeds must be at least 1"
    assert capsys.readouterr().err == "text2grad: error: --seeds must be at least 1\n"


# ---------------------------------------------------------------------------------------------
# On a local Ray cluster of 2 CPUs

def seeds_through(units, out, seeds, **fields):
    with units:
        return units.wait({s: units.submit(f"seed {s}", first_looks.one_seed, s, str(out), "cpu", None,
                                           **{**TINY, **fields}) for s in seeds})


@on_ray
def test_a_unit_through_ray_gives_what_it_gives_in_sequence(tmp_path, one_thread):
    in_sequence = seeds_through(Units(), tmp_path / "sequence", [0, 1])
    units = Units("local", out=str(tmp_path / "ray"), cluster_cpus=2)
    through_ray = seeds_through(units, tmp_path / "ray", [0, 1])
    for seed in (0, 1):
        assert_close(record(through_ray[seed]), record(in_sequence[seed]))
        # the seed, its fields and the commit it ran at recorded as in sequence
        for key in ("seed", "fields", "commit", "device"):
            assert through_ray[seed][key] == in_sequence[seed][key]
        assert through_ray[seed]["machine"].endswith(", 1 threads")
        # the records on disk are the ones returned
        assert json.loads((tmp_path / "ray" / f"seed{seed}.json").read_text())["table"] == json.loads(
            json.dumps(through_ray[seed]["table"]))
    assert sorted(t["unit"] for t in units.record()) == ["seed 0", "seed 1"]
    assert {t["pid"] for t in units.record()} != {os.getpid()}  # ran in Ray's workers


@on_ray
def test_a_worker_killed_mid_unit_costs_that_unit_only(tmp_path, one_thread):
    import threading
    out = tmp_path / "ray"
    killed = []

    def kill_seed_0():  # kill -9 the worker of seed 0 as soon as it has started
        log = out / "units" / "seed_0.txt"
        deadline = time.time() + 120
        while time.time() < deadline and not killed:
            if log.exists() and log.read_text().startswith("unit seed 0: pid"):
                pid = int(log.read_text().split()[4])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.02)
    threading.Thread(target=kill_seed_0, daemon=True).start()
    units = Units("local", out=str(out), cluster_cpus=2)
    through_ray = seeds_through(units, out, [0, 1])
    assert killed, "the worker was never seen"
    attempts = (out / "units" / "seed_0.txt").read_text().count("unit seed 0: pid")
    assert attempts == 2  # started again, once
    assert (out / "units" / "seed_1.txt").read_text().count("unit seed 1: pid") == 1
    in_sequence = seeds_through(Units(), tmp_path / "sequence", [0, 1])
    for seed in (0, 1):
        assert_close(record(through_ray[seed]), record(in_sequence[seed]))
    assert not list(out.glob("*.tmp"))


@on_ray
def test_a_unit_that_fails_of_its_own_ends_the_run_once_with_its_line(tmp_path, capsys):
    out = tmp_path / "ray"
    units = Units("local", out=str(out), cluster_cpus=2)
    with pytest.raises(SystemExit) as stop:
        with units:  # prompts with no room in the block: the unit's ValueError, through checked
            units.wait([units.submit(f"seed {s}", runstate.checked, first_looks.one_seed, s, str(out), "cpu", None,
                                     **{**TINY, "block_size": 64}) for s in (0, 1)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("text2grad: error:")]
    assert stop.value.code == 2 and len(lines) == 1 and "Traceback" not in err
    assert "block_size 64 is shorter than the longest prompt" in lines[0]
    assert lines[0].startswith("text2grad: error: seed ")
    failed = lines[0].split()[3].rstrip(":")
    assert (out / "units" / f"seed_{failed}.txt").read_text().count(f"unit seed {failed}: pid") == 1  # no retry


def protocol(out, *flags):
    return [sys.executable, "-m", "experiments.protocol", "--preset", "tiny", "--device", "cpu", "--task", "code",
            "--seeds", "2", "--out", str(out), *flags]


@on_ray
def test_ctrl_c_stops_the_tasks_and_the_protocol_s_resume_finishes_them(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the driver's stages at the units' thread count
    out = tmp_path / "ray"
    run = subprocess.Popen(protocol(out, "--ray"), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and run.poll() is None and not list(out.glob("units/code_ppo_*.txt")):
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before its PPO units started"
    run.send_signal(signal.SIGINT)
    err = run.communicate(timeout=120)[1]
    assert run.returncode == 130 and "interrupted" in err and "--resume" in err and "Traceback" not in err, err[-3000:]
    progress = json.loads((out / "code" / "progress.json").read_text())["done"]
    assert not [s for s in progress if s.startswith("test/")]  # stopped before the end
    again = subprocess.Popen(protocol(out, "--ray", "--resume"), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    resumed_pid, err = [again.pid], again.communicate(timeout=600)[1]
    assert again.returncode == 0, err[-2000:]
    undisturbed = subprocess.run(protocol(tmp_path / "sequence"), cwd=ROOT, env=env, capture_output=True, text=True)
    assert undisturbed.returncode == 0, undisturbed.stderr[-2000:]
    a, b = (json.loads((folder / "code" / "results.json").read_text()) for folder in (out, tmp_path / "sequence"))
    kept = lambda r: {k: v for k, v in r.items() if k in ("methods", "sft", "reward_model", "lambda_grid", "alignment")}
    assert_close(kept(a), kept(b))
    # the record: every PPO run and test of the resumed run, each in a worker of Ray's, not the command
    labels = [t["unit"] for t in a["units"]]
    assert "code/test/text2grad/1" in labels and all(t["pid"] != resumed_pid[0] for t in a["units"])


@on_ray
def test_a_unit_handed_another_s_handle_runs_on_what_it_returned(tmp_path, capsys):
    def double(x):
        return 2 * x

    def add(a, b):
        return a + b

    def broken(x):
        raise ValueError("the bad input")
    units = Units("local", out=str(tmp_path / "a"), cluster_cpus=2)
    with units:
        first = units.submit("first", double, 3)
        assert units.wait([units.submit("then", add, first, 1)]) == [7]
    assert sorted(t["unit"] for t in units.record()) == ["first", "then"]  # the one waited for too
    units = Units("local", out=str(tmp_path / "b"), cluster_cpus=2)
    with pytest.raises(SystemExit):
        with units:
            units.wait([units.submit("then", add, units.submit("first", runstate.checked, broken, 1), 1)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("text2grad: error:")]
    assert lines == ["text2grad: error: first: the bad input"]  # the failed unit's own line, once


@on_ray
def test_a_unit_no_node_can_hold_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # 3 CPUs a unit, on a cluster of one node of 2
        with Units("local", out=str(tmp_path), cpus=3, cluster_cpus=2):
            pass
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "no node has them (the largest: 2 and 0)" in err
    assert not (tmp_path / "units").exists()
