"""The facts task (data/facts.py) and the K sweep's arithmetic (sweep.py), against hand-worked examples."""
import json

import pytest

import text2grad
from data import Example, facts
from experiments import optimisers, ppo_runs, report, stats, sweep
from test_report import Page


def order(*sites):
    """An example with the given [kind, right, habit] sites, written by hand."""
    sites = [list(s) for s in sites]
    return Example("(prompt)", facts.restate((k, r) for k, r, _ in sites), "", [], {"sites": sites})


MAYA = order(["name", "Maya", "Omar"], ["day", "friday", "monday"], ["speed", "express", "standard"])


def test_a_generated_example_reads_as_the_docstring_says():
    e = facts.make_examples(1, seed=3, k=3)[0]
    kinds = [kind for kind, _, _ in e.facts["sites"]]
    assert kinds == [k for k in facts.KINDS if k in kinds] and len(kinds) == 3  # three kinds, in KINDS order
    assert facts.count_sites(e.prompt) == 3
    sentences = e.prompt.split(". ")
    assert sentences[0].startswith("The gift is a ")
    for sentence, (kind, right, default) in zip(sentences[1:], e.facts["sites"]):
        template, values, habit = facts.KINDS[kind]
        assert sentence.rstrip(".") + "." == template.format(value=right)  # the note states the right value
        assert right in values and default == habit and default not in e.prompt
    assert e.reference == "; ".join(f"{k} {r}" for k, r, _ in e.facts["sites"]) + "."
    shown = dict(part.split(" ") for part in e.demonstration[:-1].split("; "))
    for kind, right, default in e.facts["sites"]:
        assert shown[kind] == (default if kind in e.flaws else right)


def test_k_outside_the_kinds_is_refused():
    for k in (0, 9):
        with pytest.raises(ValueError, match="between 1 and 8"):
            facts.make_examples(1, seed=0, k=k)


def test_the_generator_is_seeded_and_k_is_drawn_from_ks():
    a, b = facts.make_examples(50, seed=7), facts.make_examples(50, seed=7)
    assert [e.prompt for e in a] == [e.prompt for e in b]
    assert {facts.count_sites(e.prompt) for e in facts.make_examples(400, seed=1, k=None)} == set(facts.KS)
    assert all(len(e.facts["sites"]) == 8 for e in facts.make_examples(20, seed=2, k=8))


def test_habits_are_injected_at_their_rate_and_independently():
    examples = facts.make_examples(4000, seed=0, k=8)
    stats = facts.site_statistics(examples, [e.demonstration for e in examples])
    for kind, share in stats["wrong"].items():  # 4000 draws: standard error 0.008
        assert abs(share - facts.HABIT_RATE) < 0.035, kind
    assert abs(stats["correlation"]["mean"]) < 0.02 and stats["correlation"]["max_abs"] < 0.08
    assert stats["correlation"]["pairs"] == 28  # 8 kinds, every pair seen


def test_critic_and_metric_on_a_hand_worked_response():
    response = "name Omar; day friday; speed standard."
    annotation = facts.critique(MAYA, response)
    assert annotation == {"textual_feedback": "Omar should be Maya. friday is right. standard should be express.",
                          "good_spans": ["friday"], "poor_spans": ["Omar", "standard"]}
    assert facts.metrics(MAYA, response) == {"sites_right": pytest.approx(1 / 3), "all_right": 0.0}
    assert facts.metrics(MAYA, MAYA.reference) == {"sites_right": 1.0, "all_right": 1.0}
    assert facts.critique(MAYA, MAYA.reference)["poor_spans"] == []


def test_critic_blames_extra_and_repeated_clauses_and_names_missing_sites():
    response = "name Maya; name Omar; size large; day"
    annotation = facts.critique(MAYA, response)
    assert annotation["good_spans"] == ["Maya"]
    assert annotation["poor_spans"] == ["name Omar", "size large", "day"]
    assert annotation["textual_feedback"] == ('Maya is right. The name is given twice. "size large" is not asked for. '
                                              'day should be friday. It leaves out the speed.')
    # the first clause of a key is the one judged; a missing site counts as wrong
    assert facts.judge(MAYA, response) == {"name": True, "day": False, "speed": None}
    assert facts.metrics(MAYA, response)["sites_right"] == pytest.approx(1 / 3)
    for span in annotation["good_spans"] + annotation["poor_spans"]:
        assert span in response


def test_site_statistics_by_hand():
    two = order(["name", "Maya", "Omar"], ["day", "friday", "monday"])
    examples = [MAYA, MAYA, two, two]
    responses = ["name Omar; day friday; speed express.", "name Maya; day monday; speed express.",
                 "name Omar; day monday.", "name Maya; day friday."]
    stats = facts.site_statistics(examples, responses)
    assert stats["wrong"] == {"name": 0.5, "day": 0.5, "speed": 0.0}
    assert stats["correlation"]["pairs"] == 0  # no pair seen 20 times
    many = facts.site_statistics(examples * 5, responses * 5)["correlation"]
    # name and day wrong together: (1,0), (0,1), (1,1), (0,0) -> phi 0; the pairs with speed are
    # seen 10 times only (left out)
    assert many["pairs"] == 1 and many["mean"] == pytest.approx(0.0)
    # name and day: 3 (wrong, wrong), 1 (wrong, right), 1 (right, wrong), 3 (right, right), x5:
    # phi = (3*3 - 1*1) / sqrt(4*4*4*4) = 0.5; speed is never wrong (left out)
    rows = [("Omar", "monday")] * 3 + [("Omar", "friday"), ("Maya", "monday")] + [("Maya", "friday")] * 3
    responses = [f"name {n}; day {d}; speed express." for n, d in rows] * 5
    stats = facts.site_statistics([MAYA] * len(responses), responses)
    assert stats["correlation"] == {"mean": pytest.approx(0.5), "max_abs": pytest.approx(0.5), "pairs": 1}
    assert stats["wrong"] == {"name": 0.5, "day": 0.5, "speed": 0.0}


def test_updates_to_threshold_by_hand():
    curve = [(0, 0.2), (2, 0.5), (4, 0.7), (6, 0.95)]
    other = [(0, 0.2), (2, 0.3), (4, 0.4), (6, 0.61)]
    assert stats.updates_to_hold(curve, 0.6) == 4 and stats.updates_to_hold(curve, 0.5) == 2
    assert stats.updates_to_hold(curve, 0.99) is None
    # from 0.2, half the gap to 1 is 0.6, 90% is 0.92; a curve that never gets there counts as 6 + 2
    out = sweep.thresholds([curve, other], 0.2, 6, 2)
    assert out["0.5"]["level"] == pytest.approx(0.6) and out["0.5"]["per_seed"] == [4, 6]
    assert out["0.9"]["per_seed"] == [6, 8] and out["0.9"]["censored"] == 1
    # the mean curve is 0.2, 0.4, 0.55, 0.78: it holds 0.6 from update 6 and never reaches 0.92
    assert out["0.5"]["mean_curve"] == 6 and out["0.9"]["mean_curve"] is None
    # Kaplan-Meier: at 0.6 both reach it (at 4 and 6), S(4) = 1/2; at 0.92 one reaches it at 6 and
    # the other is censored at 6 and still at risk there, S(6) = 1 - 1/2
    assert out["0.5"]["km_median"] == 4 and out["0.9"]["km_median"] == 6


def test_sustained_crossing_on_hand_made_curves():
    collapse = [(0, 0.2), (1, 0.95), (2, 0.96), (3, 0.7), (4, 0.8)]  # touches 0.9 at 1, ends below it
    recovers = [(0, 0.2), (1, 0.95), (2, 0.6), (3, 0.93), (4, 0.94)]  # climbs back at 3 and stays
    assert stats.updates_to_hold(collapse, 0.9) is None  # though it touched the level at update 1
    assert stats.updates_to_hold(recovers, 0.9) == 3
    assert stats.updates_to_hold([(0, 0.2), (1, 0.9)], 0.9) == 1  # the level itself holds
    assert stats.updates_to_hold([(0, 0.95), (1, 0.97)], 0.9) == 0  # held from the start
    # the sweep reads the sustained crossing; the collapsed run is censored at budget + eval_every
    # (4 + 1), though its first touch was at update 1. From 0.2, 90% of the gap is 0.92.
    out = sweep.thresholds([collapse, recovers], 0.2, 4, 1)
    assert out["0.9"]["per_seed"] == [5, 3] and out["0.9"]["censored"] == 1
    # half the gap is 0.6: the collapsed run ends at 0.8 and holds from update 1 on; the other dips to 0.6
    # (the level itself) and so holds from 1 as well
    assert out["0.5"]["per_seed"] == [1, 1] and out["0.5"]["censored"] == 0


def test_speed_ratio_reads_mean_curves_and_resamples_paired_seeds():
    fast, slow, never = [(0, 0.0), (1, 1.0), (2, 1.0)], [(0, 0.0), (1, 0.0), (2, 1.0)], [(0, 0.0), (1, 0.2), (2, 0.3)]
    r = sweep.ratio(sweep.speed_ratio([slow, slow], [fast, fast], 0.5, 3), 2)
    assert r == {"ratio": 2.0, "ci95": [2.0, 2.0], "censored": 0.0}
    # a's mean curve (fast, slow) is 0, 0.5, 1: it holds 0.5 from update 1. Resamples of its seeds:
    # (fast, fast) 1, (slow, slow) 2 (a quarter of them), mixed 1; b is fast throughout
    r = sweep.ratio(sweep.speed_ratio([fast, slow], [fast, fast], 0.5, 3), 2)
    assert r["ratio"] == 1.0 and r["ci95"] == [1.0, 2.0] and r["censored"] == 0.0
    # a mean curve that never holds it counts as the budget plus one evaluation, 3: a bound, flagged
    r = sweep.ratio(sweep.speed_ratio([never, never], [fast, fast], 0.5, 3), 2)
    assert r == {"ratio": 3.0, "ci95": [3.0, 3.0], "censored": 1.0}


def test_lambda_is_chosen_by_the_final_score_or_the_last_quarter():
    sooner, later = [(0, 0.2), (1, 0.9), (2, 0.9)], [(0, 0.2), (1, 0.5), (2, 0.95)]
    assert ppo_runs.choice_score(sooner, "final") == 0.9 and ppo_runs.choice_score(later, "final") == 0.95
    # rise fast then collapse, against rise slowly and stay: the last quarter (here the last 2 of 8
    # points) prefers the second
    collapse = list(enumerate([0.2, 0.9, 0.95, 0.95, 0.9, 0.85, 0.8, 0.7]))
    steady = list(enumerate([0.2, 0.4, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92]))
    assert ppo_runs.choice_score(collapse, "last_quarter") == pytest.approx(0.75)
    assert ppo_runs.choice_score(steady, "last_quarter") == pytest.approx(0.91)
    assert ppo_runs.choice_score([(0, 0.2, 0.1), (1, 0.6, 0.0)], "last_quarter") == 0.6  # a test score beside
    with pytest.raises(ValueError, match="choose_by"):
        ppo_runs.choice_score(steady, "mean")


def test_sweep_splits_share_no_prompt_and_hold_one_k_each():
    train, per_k = sweep.make_splits({"train": 300, "validation": 30, "test": 30}, seed=0, ks=[1, 8])
    held = [e.prompt for split in per_k.values() for examples in split.values() for e in examples]
    assert not set(held) & {e.prompt for e in train}
    for split in per_k.values():  # validation and test share none (a split itself may repeat one at K = 1)
        assert not {e.prompt for e in split["validation"]} & {e.prompt for e in split["test"]}
    for k, split in per_k.items():
        assert all(facts.count_sites(e.prompt) == k for examples in split.values() for e in examples)
    assert len(per_k[8]["test"]) == 30  # 8 sites: no repeat in 30 draws


@pytest.mark.slow
def test_the_sweep_end_to_end(tmp_path, capsys):
    out = tmp_path / "sweep"
    sweep.main(["--preset", "tiny", "--device", "cpu", "--ks", "1", "2", "--seeds", "2", "--out", str(out)])
    results = json.loads((out / "results.json").read_text())
    assert results["ks"] == [1, 2] and set(results["per_k"]) == {"1", "2"}
    for r in results["per_k"].values():
        assert set(r["methods"]) == {"sft", *text2grad.METHODS} and len(r["methods"]["oracle"]["scores"]) == 2
        for steps in r["thresholds"].values():
            assert all(len(s["per_seed"]) == 2 for s in steps.values())
        for q, pairs in r["ratios"].items():  # each ratio from the mean test curves, read by a loop here
            for key, v in pairs.items():
                held = []
                for name in key.split(" / "):
                    level, curve = r["thresholds"][name][q]["level"], r["methods"][name]["test_curve"]
                    above = [u for j, (u, _) in enumerate(curve) if all(s >= level - 1e-9 for _, s in curve[j:])]
                    held.append(above[0] if above else r["updates"] + r["eval_every"])
                assert v["ratio"] == pytest.approx(held[0] / held[1]) and v["ci95"][0] <= v["ci95"][1]
        for name in text2grad.METHODS:  # the thresholds read the mean test curve's seeds
            assert [u for u, _ in r["methods"][name]["test_curve"]] == [u for u, _ in r["methods"][name]["curve"]]
    page = Page((out / "report.html").read_text(encoding="utf-8"))
    assert sorted(page.curves) == sorted(list(text2grad.METHODS) * 2)  # a learning-curve chart per K
    figure = Page((out / "updates_to_90.svg").read_text(encoding="utf-8"))  # stand-alone, well formed
    assert figure.tags.count("polyline") == len(text2grad.METHODS)
    # the sweep's record: its per-seed numbers, the tables rebuilt from them with no model
    report.main(["--out", str(out), "--record", str(tmp_path / "sweep.json")])
    capsys.readouterr()
    report.main(["--from", str(tmp_path / "sweep.json")])
    printed = capsys.readouterr().out
    held = " ".join(map(str, results["per_k"]["2"]["thresholds"]["text2grad"]["0.9"]["per_seed"]))
    assert f"| Text2Grad | {held} |" in printed and "The K sweep at K = 1" in printed
    # --resume with one more seed adds runs and keeps the finished ones
    sweep.main(["--preset", "tiny", "--device", "cpu", "--ks", "1", "2", "--seeds", "3", "--out", str(out), "--resume"])
    again = json.loads((out / "results.json").read_text())
    assert len(again["per_k"]["2"]["methods"]["text2grad"]["scores"]) == 3
    assert again["per_k"]["2"]["methods"]["text2grad"]["scores"][:2] == results["per_k"]["2"]["methods"]["text2grad"]["scores"]
    # GRPO's runs on the same folder: each method chooses its group size; PPO's results stay as they were
    sweep.main(["--preset", "tiny", "--device", "cpu", "--ks", "1", "--seeds", "2", "--out", str(out), "--resume",
                "--advantage", "grpo"])
    grpo = json.loads((out / "results_grpo.json").read_text())
    assert json.loads((out / "results.json").read_text()) == again and grpo["advantage"] == "grpo"
    for name in text2grad.METHODS:
        m = grpo["per_k"]["1"]["methods"][name]
        assert m["lambda"] is None and m["group"] in sweep.SWEEP_PRESETS["tiny"]["groups"] and len(m["scores"]) == 2
    assert "GRPO, group" in (out / "report_grpo.html").read_text(encoding="utf-8")
    sweep.main(["--preset", "tiny", "--device", "cpu", "--ks", "1", "--seeds", "2", "--out", str(out), "--resume",
                "--advantage", "grpo", "--per", "response"])  # the collapse: span rewards summed before normalising
    capsys.readouterr()
    tables = optimisers.compare(str(out))  # PPO against GRPO, one table per K both ran, on the seeds both ran
    printed = capsys.readouterr().out
    assert list(tables) == ["sweep, K=1"] and "updates to hold 90%" in printed
    assert "oracle summed - oracle_scalar" in printed and "(the same validation curves)" in printed
    for name in text2grad.METHODS:  # two seeds, each on its own reward model: the plain paired mean
        ppo, ours = (r["per_k"]["1"]["methods"][name]["scores"][:2] for r in (again, grpo))
        assert tables["sweep, K=1"]["rows"][name]["grpo_minus_ppo"]["mean"] == pytest.approx(
            (ours[0] - ppo[0] + ours[1] - ppo[1]) / 2)
    # the updates column: with two seeds, the Kaplan-Meier median to hold 90% is the sooner seed's update
    # (a seed that never holds it is written as budget + eval_every, after any update), "-" if neither holds it
    r = again["per_k"]["1"]
    for name in text2grad.METHODS:
        held = r["thresholds"][name]["0.9"]["per_seed"][:2]
        want = str(min(held)) if min(held) < r["updates"] + r["eval_every"] else "-"
        assert tables["sweep, K=1"]["rows"][name]["updates"][0] == want


@pytest.mark.slow
def test_the_defence_ablation_runs_each_guard_where_it_applies(tmp_path):
    out = tmp_path / "sweep"
    sweep.main(["--preset", "tiny", "--device", "cpu", "--ks", "1", "--seeds", "1", "--out", str(out), "--ablation"])
    table = json.loads((out / "ablation.json").read_text())["per_k"]["1"]
    assert set(table) == set(sweep.DEFENCES)
    runs = json.loads((out / "ablation" / "k1" / "progress.json").read_text())["done"]
    # Text2Grad runs every distinct setting (6); the scalar reward has no spans, so its span settings are
    # the same runs as their token twins (paper, cut, refresh, cut+refresh: 4), each run once
    keys = {name: {stage.split("/")[1] for stage in runs if stage.startswith(name + "/")} for name in sweep.ABLATION["methods"]}
    assert len(keys["text2grad"]) == len(sweep.DEFENCES) == 6 and len(keys["ppo_scalar"]) == 4
    assert all("praise=token" in key for key in keys["ppo_scalar"])
    assert sum("praise=phrase" in key for key in keys["text2grad"]) == 3
    for setting, fields in sweep.DEFENCES.items():  # each row reads its own runs
        key = f"praise={fields['praise']}-cut_praise={fields['cut_praise']}"
        key += f"-refresh_every={fields['refresh_every']}" if fields["refresh_every"] else ""
        assert table[setting]["text2grad"]["per_seed"] == [runs[f"text2grad/{key}/0"]["value"]["curve"][-1][1]]


def test_bad_k_is_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        sweep.main(["--ks", "3"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_seed_by_seed_speed_with_its_sign_test():
    # seeds 1-3: b sooner; seed 4: a sooner; seed 5: tied; p = 2 * (C(4,3) + C(4,4)) / 16 = 10/16
    out = sweep.faster([7, 6, 9, 3, 5], [4, 4, 4, 5, 5])
    assert out == {"b": 3, "a": 1, "tied": 1, "sign_p": pytest.approx(10 / 16)}


def test_right_per_kind_by_hand():
    example = facts.make_examples(1, seed=3, k=3)[0]
    (k1, v1, _), (k2, v2, d2), (k3, v3, _) = example.facts["sites"]
    right = f"{k1} {v1}; {k2} {v2}; {k3} {v3}."
    wrong = f"{k1} {v1}; {k2} {d2}."  # the second kind's default, the third left out
    assert facts.right_per_kind([example, example], [right, wrong]) == {k1: 1.0, k2: 0.5, k3: 0.5}
    assert facts.count_sites(facts.make_examples(1, seed=0)[0].prompt) == facts.K == 8
