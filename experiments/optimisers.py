"""The optimiser study: PPO against GRPO, each with span and last-token rewards, learned and the critic's.

    python -m experiments.protocol --task code --seeds 9 --reward-seeds 3 --out runs      # PPO: results.json
    python -m experiments.protocol --task code --seeds 9 --reward-seeds 3 --out runs --resume --advantage grpo
    python -m experiments.optimisers --out runs/code

The GRPO run resumes the PPO run's folder, so both read the same SFT policy, reward models and
prompts: seed s of a GRPO run is paired with seed s of the PPO run (the same reward-model seed and
the same number of sampled responses per update: one per prompt for PPO, `group` per prompt for
GRPO, so the prompts drawn differ). Each PPO method chose its GAE lambda on validation, each
GRPO method its group size. Prints, on test, per method: each optimiser's mean with its 95%
interval and its choice, GRPO - PPO paired over the seeds (runs that read one reward-model seed
averaged first, as experiments/summary.py does), the validation curve's mean height for both, and
the explained variance of PPO's value head (GRPO has none); then placement (every token - last
token) under each optimiser. A span method normalised per response (--per response,
results_grpo_sum.json) sums its token rewards before normalising: the same advantages as its own
reward on the last token, so its row should match that method's (the collapse). With one
reward-model seed the runs share one reward model and no interval can be had ("1 unit: no interval"). Every
column reads the seeds both runs have. PPO whitens its advantages and GRPO does not (the group
normalisation takes its place); both run at PPO's learning rate and clip.
"""
import argparse
import os
import sys

from experiments import stats
from experiments.run_folder import read_json
from experiments.runstate import checked, fail
from text2grad import METHODS

PLACEMENT = (("text2grad", "text2grad_last"), ("oracle", "oracle_scalar"))  # (every token, last token)


def paired(a, b, key="scores"):
    """a - b over the seeds both have, grouped by reward-model seed (stats.paired_difference); the two
    runs must have read the same reward model at every seed."""
    n = min(len(a[key]), len(b[key]))
    if a["reward_seeds"][:n] != b["reward_seeds"][:n]:
        fail(f"the runs read different reward-model seeds ({a['reward_seeds'][:n]} against {b['reward_seeds'][:n]}): "
             "resume the GRPO run with the PPO run's --reward-seeds")
    return stats.paired_difference(a[key][:n], b[key][:n], a["reward_seeds"][:n])


def heights(method):
    """The mean height of each seed's validation curve (stats.curve_area over the curve's points)."""
    return [stats.curve_area([(p[0], p[1]) for p in curve]) for curve in method["curves"]]


def compare(folder):
    """The tables of one task's folder; returns {"rows", "placement"} (what is printed)."""
    results = checked(read_json, os.path.join(folder, "results.json"))
    found = {per: os.path.join(folder, name) for per, name in (("token", "results_grpo.json"),
                                                                  ("response", "results_grpo_sum.json"))}
    files = {per: checked(read_json, path) for per, path in found.items() if os.path.exists(path)}
    if "token" not in files:
        fail(f"{folder} has no results_grpo.json: run python -m experiments.protocol --resume --advantage grpo first")
    for per, other in files.items():
        if (other["seed"], other["methods"]["sft"]["scores"]) != (results["seed"], results["methods"]["sft"]["scores"]):
            fail(f"{found[per]} did not start from the SFT policy of {folder}/results.json: run GRPO with --resume on "
                 "the PPO run's folder")
    ppo, runs = results["methods"], {per: r["methods"] for per, r in files.items()}
    grpo = runs["token"]
    print(f"\n{os.path.basename(os.path.normpath(folder))}: test score, mean ± 95% interval over seeds (PPO's lambda, "
          f"GRPO's group size); GRPO - PPO paired by seed; curve height on validation; PPO's value head")
    print(f"{'method':15s} {'PPO (lambda)':>24s} {'GRPO (group)':>24s}  {'GRPO - PPO':>26s} {'height, GRPO - PPO':>26s}"
          f" {'EV':>5s}")
    rows = {}
    for name in METHODS:
        a, b = ppo[name], grpo[name]
        n = min(len(a["scores"]), len(b["scores"]))  # the seeds both ran: every column reads the same ones
        (ma, ha), (mb, hb) = stats.mean_ci95(a["scores"][:n]), stats.mean_ci95(b["scores"][:n])
        height = stats.paired_difference(heights(b)[:n], heights(a)[:n], b["reward_seeds"][:n])
        ev = sum(a["explained_variance"][:n]) / n
        rows[name] = {"ppo": ma, "grpo": mb, "grpo_minus_ppo": paired(b, a), "height": height, "ev": ev}
        print(f"{name:15s} {ma:7.3f} ± {ha:.3f} ({a['lambda']:<4}) {mb:9.3f} ± {hb:.3f} ({b['group']:<2})  "
              f"{stats.difference_text(rows[name]['grpo_minus_ppo']):>26s} {stats.difference_text(height):>26s} {ev:5.2f}")
    placement = {}
    print("\nplacement, every token - last token (paired by seed):")
    for every, last in PLACEMENT:
        for optimiser, methods in (("PPO", ppo), ("GRPO", grpo)):
            placement[f"{optimiser}: {every} - {last}"] = d = paired(methods[every], methods[last])
            print(f"  {optimiser:5s} {every} - {last}".ljust(40) + stats.difference_text(d))
    if "response" in runs:
        print("\nthe collapse (--per response): each span method's rewards summed before normalising, beside its "
              "own reward on the last token")
        for every, last in PLACEMENT:
            d = paired(runs["response"][every], grpo[last])
            placement[f"GRPO summed: {every} - {last}"] = d
            same = all(abs(p[1] - q[1]) < 1e-9 for c, e in zip(runs["response"][every]["curves"], grpo[last]["curves"])
                       for p, q in zip(c, e))  # the missing-EOS penalty is subtracted in another float order
            print(f"  {every} summed - {last}".ljust(40) + stats.difference_text(d) + (" (the same validation curves)" if same else ""))
    return {"rows": rows, "placement": placement}


def main(argv=None):
    """python -m experiments.optimisers --out DIR: PPO's and GRPO's runs of one task folder, side by side."""
    parser = argparse.ArgumentParser(prog="python -m experiments.optimisers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", nargs="+", default=["runs/code"], help="task folders with results.json and "
                        "results_grpo.json (default: runs/code)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    for folder in args.out:
        if not os.path.exists(os.path.join(folder, "results.json")):
            fail(f"{folder} has no results.json: run python -m experiments.protocol first")
        compare(folder)


if __name__ == "__main__":
    main()
