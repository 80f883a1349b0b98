"""The optimiser study: PPO against GRPO, each with span and last-token rewards, learned and the critic's.

    python -m experiments.protocol --task code --seeds 9 --reward-seeds 3 --out runs      # PPO: results.json
    python -m experiments.protocol --task code --seeds 9 --reward-seeds 3 --out runs --resume --advantage grpo
    python -m experiments.optimisers --out runs/code
    python -m experiments.sweep --ks 1 8 --seeds 8 --reward-seeds 8 --out runs/sweep --resume --advantage grpo
    python -m experiments.optimisers --out runs/sweep      # a sweep's folder: one table per K

The GRPO run resumes the PPO run's folder, so both read the same SFT policy, reward models and
prompts: seed s of a GRPO run is paired with seed s of the PPO run (the same reward-model seed and
the same number of sampled responses per update: one per prompt for PPO, `group` per prompt for
GRPO, so the prompts drawn differ). Each PPO method chose its GAE lambda on validation, each
GRPO method its group size. Prints, on test, per method: each optimiser's mean with its 95%
interval and its choice, GRPO - PPO paired over the seeds (runs that read one reward-model seed
averaged first, as experiments/summary.py does), the validation curve's mean height for both (a
sweep's test curve, which its thresholds read), the updates each needs (on a task, until the mean
validation curve holds scalar PPO's final score to the end; in a sweep, the Kaplan-Meier median to hold 90%
of the gap from SFT to 1), the explained variance of PPO's value head (GRPO has none); then
placement (every token - last token) and the paper's contrast (Text2Grad - scalar PPO) under each
optimiser. A span method normalised per response (--per response, results_grpo_sum.json) sums its
token rewards before normalising: the same advantages as its own reward on the last token, so its
row should match that method's (the collapse). With one reward-model seed the runs share one
reward model and no interval can be had ("1 unit: no interval"). Every column reads the seeds both
runs have. PPO whitens its advantages and GRPO does not (the group
normalisation takes its place); both run at PPO's learning rate and clip.
"""
import argparse
import os
import sys

from experiments import stats
from experiments.run_folder import read_json
from experiments.runstate import checked, fail
from experiments.summary import reads_a_model
from text2grad import METHODS

PLACEMENT = (("text2grad", "text2grad_last"), ("oracle", "oracle_scalar"))  # (every token, last token)
PAPER = ("text2grad", "ppo_scalar")  # the paper's contrast: placement and judge changed together


def paired(a, b, names, key="scores"):
    """a - b over the seeds both have (stats.paired_difference), grouped by reward-model seed when one
    of the methods `names` reads a learned model (summary.shared; the critic's runs share nothing); the
    two runs must have read the same reward model at every seed."""
    n = min(len(a[key]), len(b[key]))
    if a["reward_seeds"][:n] != b["reward_seeds"][:n]:
        fail(f"the runs read different reward-model seeds ({a['reward_seeds'][:n]} against {b['reward_seeds'][:n]}): "
             "resume the GRPO run with the PPO run's --reward-seeds")
    groups = a["reward_seeds"][:n] if any(reads_a_model(name) for name in names) else None
    return stats.paired_difference(a[key][:n], b[key][:n], groups)


def heights(method):
    """The mean height of each seed's validation curve (stats.curve_area); a sweep stores its test
    curve's as "area" (the thresholds read the test curve there)."""
    if "area" in method:
        return method["area"]
    return [stats.curve_area([(p[0], p[1]) for p in curve]) for curve in method["curves"]]


def updates(block, name, n, level):
    """Updates to a level, from the first n seeds: in a sweep, the Kaplan-Meier median to hold 90% of
    the gap from SFT to 1 (sweep.thresholds); in a task's run, the first update from which the mean
    validation curve holds `level` to the end (stats.updates_to_hold). "-" where it never does."""
    if "thresholds" in block:
        held = block["thresholds"][name]["0.9"]["per_seed"][:n]
        never = block["updates"] + block["eval_every"]  # the bound written for a seed that never holds it
        u = stats.km_median([min(h, block["updates"]) for h in held], [h < never for h in held])
    else:
        u = stats.updates_to_hold(stats.mean_curve(block["methods"][name]["curves"][:n]), level)
    return "-" if u is None else str(u)


def table(title, block, grpo_blocks):
    """One task's (or one K's) rows: block is PPO's results, grpo_blocks {per: GRPO's}."""
    ppo, runs = block["methods"], {per: b["methods"] for per, b in grpo_blocks.items()}
    grpo = runs["token"]
    sweep = "thresholds" in block
    level = None if sweep else sum(c[-1][1] for c in ppo["ppo_scalar"]["curves"]) / len(ppo["ppo_scalar"]["curves"])
    reach = "to hold 90%" if sweep else "to hold PPO scalar's final"
    print(f"\n{title}: test score, mean ± 95% interval over seeds (PPO's lambda, GRPO's group size); GRPO - PPO paired "
          f"by seed; curve height on {'test' if sweep else 'validation'}; updates {reach} (PPO, GRPO); PPO's value head")
    print(f"{'method':15s} {'PPO (lambda)':>24s} {'GRPO (group)':>24s}  {'GRPO - PPO':>26s} {'height, GRPO - PPO':>26s}"
          f" {'updates':>8s} {'EV':>5s}")
    rows = {}
    for name in METHODS:
        a, b = ppo[name], grpo[name]
        n = min(len(a["scores"]), len(b["scores"]))  # the seeds both ran: every column reads the same ones
        (ma, ha), (mb, hb) = stats.mean_ci95(a["scores"][:n]), stats.mean_ci95(b["scores"][:n])
        height = paired({**b, "height": heights(b)}, {**a, "height": heights(a)}, [name], "height")
        ev = sum(a["explained_variance"][:n]) / n
        steps = (updates(block, name, n, level), updates(grpo_blocks["token"], name, n, level))
        rows[name] = {"ppo": ma, "grpo": mb, "grpo_minus_ppo": paired(b, a, [name]), "height": height, "ev": ev, "updates": steps}
        print(f"{name:15s} {ma:7.3f} ± {ha:.3f} ({a['lambda']:<4}) {mb:9.3f} ± {hb:.3f} ({b['group']:<2})  "
              f"{stats.difference_text(rows[name]['grpo_minus_ppo']):>26s} {stats.difference_text(height):>26s}"
              f" {'/'.join(steps):>8s} {ev:5.2f}")
    placement = {}
    print("\nplacement, every token - last token, and the paper's contrast (paired by seed):")
    for every, last in (*PLACEMENT, PAPER):
        for optimiser, methods in (("PPO", ppo), ("GRPO", grpo)):
            placement[f"{optimiser}: {every} - {last}"] = d = paired(methods[every], methods[last], [every, last])
            print(f"  {optimiser:5s} {every} - {last}".ljust(40) + stats.difference_text(d))
    if "response" in runs:
        print("\nthe collapse (--per response): each span method's rewards summed before normalising, beside its "
              "own reward on the last token")
        for every, last in PLACEMENT:
            d = paired(runs["response"][every], grpo[last], [every, last])
            placement[f"GRPO summed: {every} - {last}"] = d
            curves = [m["curves"] if "curves" in m else [m["curve"]]  # a sweep keeps the mean curve only
                      for m in (runs["response"][every], grpo[last])]
            # to within 1e-9: the missing-EOS penalty is subtracted in another float order
            same = all(abs(p[1] - q[1]) < 1e-9 for c, e in zip(*curves) for p, q in zip(c, e))
            print(f"  {every} summed - {last}".ljust(40) + stats.difference_text(d)
                  + (" (the same validation curves)" if same else ""))
    return {"rows": rows, "placement": placement}


def compare(folder):
    """The tables of one task's folder, or of each K of a sweep's: {title: {"rows", "placement"}}, what is
    printed under each title."""
    results = checked(read_json, os.path.join(folder, "results.json"))
    found = {per: os.path.join(folder, name) for per, name in (("token", "results_grpo.json"),
                                                                  ("response", "results_grpo_sum.json"))}
    files = {per: checked(read_json, path) for per, path in found.items() if os.path.exists(path)}
    if "token" not in files:
        fail(f"{folder} has no results_grpo.json: run the PPO run's command again with --resume --advantage grpo first")
    name = os.path.basename(os.path.normpath(folder))
    if results.get("kind") != "sweep":
        blocks = {name: (results, files)}
    else:  # a sweep: each K its own table, over the Ks that every file has
        ks = [k for k in results["per_k"] if all(k in other["per_k"] for other in files.values())]
        blocks = {f"{name}, K={k}": (results["per_k"][k], {per: other["per_k"][k] for per, other in files.items()})
                  for k in ks}
    for block, others in blocks.values():
        for per, other in others.items():
            if files[per]["seed"] != results["seed"] or other["methods"]["sft"]["scores"] != block["methods"]["sft"]["scores"]:
                fail(f"{found[per]} did not start from the SFT policy of {folder}/results.json: run GRPO with --resume "
                     "on the PPO run's folder")
    return {title: table(title, block, others) for title, (block, others) in blocks.items()}


def main(argv=None):
    """python -m experiments.optimisers --out DIR: PPO's and GRPO's runs of a task's folder or a sweep's, side by side."""
    parser = argparse.ArgumentParser(prog="python -m experiments.optimisers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", nargs="+", default=["runs/code"], help="task (or sweep) folders with results.json "
                        "and results_grpo.json (default: runs/code)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    for folder in args.out:
        if not os.path.exists(os.path.join(folder, "results.json")):
            fail(f"{folder} has no results.json: run python -m experiments.protocol first")
        compare(folder)


if __name__ == "__main__":
    main()
