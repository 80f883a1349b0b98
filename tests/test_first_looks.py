"""experiments/first_looks.py: its records, the lambda chosen on validation, a seed put together
from the grid's runs, and the finding, against hand-made tables (no training)."""
import json

import pytest

import text2grad
from experiments import first_looks


def table(lam, validation, holds_at):
    """A run's table: SFT at 0.2, then each method's curve over 4 updates, at 1.0 from update
    holds_at[method] on and 0.5 before it; validation[method] is its validation score."""
    rows = {"sft": {"lambda": None, "curve": [(0, 0.2, 0.2, 0.0)], "test": (0.2, 0.0)}}
    for method, at in holds_at.items():
        curve = [(u, validation[method], 1.0 if u >= at else 0.5, 0.0) for u in range(5)]
        rows[method] = {"lambda": lam, "curve": curve, "test": (curve[-1][2], 0.0)}
    return rows


def fake_run(holds):
    """text2grad.run stand-in: lambda 0.5 validates better for the span methods, 0.95 for the sums."""
    def run(config):
        better = {0.5: ("text2grad", "oracle"), 0.95: ("text2grad_last", "oracle_scalar")}[config.lam]
        validation = {m: 0.9 if m in better else 0.8 for m in holds}
        landed = {m: {"agreement": 0.5 if m in ("text2grad", "oracle") else 0.4, "even": 0.1} for m in holds}
        return table(config.lam, validation, holds), landed
    return run


def test_records_go_into_a_new_folder_and_are_read_back(tmp_path, monkeypatch):
    holds = {"text2grad_last": 3, "text2grad": 1, "oracle_scalar": 4, "oracle": 2}
    monkeypatch.setattr(first_looks, "run", fake_run(holds))
    out = tmp_path / "new" / "folder"
    record = first_looks.one_seed(0, str(out), "cpu", lam=0.5)
    assert (out / "seed0_lam0.5.json").exists() and (out / "seed0_lam0.5.txt").exists()
    monkeypatch.setattr(first_looks, "run", None)  # read back, not run again
    assert first_looks.one_seed(0, str(out), "cpu", lam=0.5)["table"] == json.loads(json.dumps(record["table"]))


def test_lambda_is_chosen_on_validation_and_a_seed_is_put_together_from_the_grid(tmp_path, monkeypatch):
    holds = {"text2grad_last": 3, "text2grad": 1, "oracle_scalar": 4, "oracle": 2}
    monkeypatch.setattr(first_looks, "run", fake_run(holds))
    by_lam = {lam: [first_looks.one_seed(s, str(tmp_path), "cpu", lam=lam) for s in (0, 1)] for lam in (0.5, 0.95)}
    assert first_looks.choose_lambdas(by_lam) == {"text2grad_last": 0.95, "text2grad": 0.5,
                                                  "oracle_scalar": 0.95, "oracle": 0.5}
    monkeypatch.setitem(text2grad.LAMBDAS, "facts", {**text2grad.LAMBDAS["facts"], "text2grad": 0.5})
    monkeypatch.setattr(first_looks, "LAMBDAS", text2grad.LAMBDAS)
    monkeypatch.setattr(first_looks, "run", None)  # nothing runs: both lambdas' runs are there
    seed = first_looks.one_seed(1, str(tmp_path), "cpu", task="facts")
    assert seed["table"]["text2grad"]["lambda"] == 0.5 and seed["table"]["oracle"]["lambda"] == 0.95
    numbers = first_looks.per_seed(seed)
    # SFT at 0.2: 90% of the way is 0.92, held from update `holds_at` on
    assert {m: numbers[m]["hold"] for m in holds} == holds
    found = first_looks.finding([numbers, numbers])
    assert found["placement, learned"]["sooner"] == 2
    assert found["placement, learned"]["geometric_mean_ratio"] == pytest.approx(3.0)
    assert found["placement, critic"]["geometric_mean_ratio"] == pytest.approx(2.0)
    assert found["placement, critic"]["agreement"][0] == pytest.approx(0.1)


def test_a_folder_of_another_tasks_runs_is_refused(tmp_path, monkeypatch, capsys):
    holds = {"text2grad_last": 3, "text2grad": 1, "oracle_scalar": 4, "oracle": 2}
    monkeypatch.setattr(first_looks, "run", fake_run(holds))
    first_looks.one_seed(0, str(tmp_path), "cpu", lam=0.5, task="facts")
    with pytest.raises(ValueError, match="holds a run of {'task': 'facts'}, not {'task': 'code'}"):
        first_looks.one_seed(0, str(tmp_path), "cpu", lam=0.5, task="code")
    with pytest.raises(SystemExit) as stop:
        first_looks.main(["--seeds", "0", "--lams", "0.5", "--task", "code", "--out", str(tmp_path),
                          "--device", "cpu"])
    assert stop.value.code == 2 and "use another --out" in capsys.readouterr().err


def test_the_record_and_the_table_it_rebuilds(tmp_path, monkeypatch, capsys):
    from experiments import report
    holds = {"text2grad_last": 3, "text2grad": 1, "oracle_scalar": 4, "oracle": 2}
    monkeypatch.setattr(first_looks, "run", fake_run(holds))
    for seed in (0, 1):
        for lam in (0.5, 0.95):
            first_looks.one_seed(seed, str(tmp_path), "cpu", lam=lam, task="facts")
    monkeypatch.setattr(first_looks, "run", None)  # the seeds are put together from the grid's runs
    path = tmp_path / "record.json"
    first_looks.main(["--seeds", "0", "1", "--confirm", "0", "--out", str(tmp_path), "--device", "cpu",
                      "--record", str(path)])
    record = json.loads(path.read_text())
    assert record["kind"] == "first_look" and record["confirm"] == [0]
    assert record["seeds"]["1"]["text2grad"]["hold"] == 1 and record["seeds"]["1"]["text2grad_last"]["hold"] == 3
    capsys.readouterr()
    report.main(["--from", str(path)])
    printed = capsys.readouterr().out
    # holds 1 and 3 (learned), 2 and 4 (critic) on both seeds: ratios 3 and 2 on each, no spread
    assert "| updates to hold 90% of the gap, per seed (0) | 1 / 3 | 2 / 4 |" in printed
    assert "| updates to hold 90% of the gap, per seed (1) | 1 / 3 | 2 / 4 |" in printed
    assert "| spans sooner, seeds 0 / 1 | 1 of 1 / 1 of 1 | 1 of 1 / 1 of 1 |" in printed
    assert "| ratio summed / span, geometric mean, seeds 0 / 1 | 3.00 (1 seed) / 3.00 (1 seed) |" in printed
    # heights over updates 1-4: text2grad 1 1 1 1, text2grad_last .5 .5 1 1; oracle .5 1 1 1,
    # oracle_scalar .5 .5 .5 1: +0.25 with either judge
    assert ("| test curve's mean height after SFT, span - summed, seeds 1 (after the fact) | "
            "+0.250 (1 seed) (1 higher, 0 lower) | +0.250 (1 seed) (1 higher, 0 lower) |") in printed
    # agreement 0.5 (spans) against 0.4 (sums) on both seeds, the even push at 0.1
    assert "| agreement of the first update, seeds 1 (even push) | 0.50 / 0.40 (0.10) | 0.50 / 0.40 (0.10) |" in printed
    assert "| agreement, span - summed, paired, seeds 1 | +0.10 (1 seed) (1 higher, 0 lower) |" in printed
