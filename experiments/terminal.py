"""terminal.py: a run's summary (summary.py) as tables in the terminal, and the K sweep's.

The results table (test metric per method, mean and 95% interval over seeds, each method's GAE
lambda and explained variance), the paired differences, the lambda grid and the
reward models' span F1; then, on a terminal, a few test responses with their tokens
coloured by the reward model's delta. report.py prints these and draws the same summary as an
HTML page.
"""
import sys

from data import facts
from experiments import stats
from text2grad import METHODS


def print_reward_models(task, results):
    """The reward models' span F1 (and, with several seeds, cot - no_cot paired over them)."""
    rm = results["reward_model"]
    for name in ("cot", "no_cot"):
        print(f"[{task.NAME}] reward model {name:6s}: span F1 positive {rm[name]['positive_f1']:.3f}, "
              f"negative {rm[name]['negative_f1']:.3f}, exact spans {rm[name]['exact_span_match']:.3f}"
              + (f", critique ROUGE-L {rm[name]['critique_rougeL']:.3f}" if name == "cot" else ""))
    seeded = rm["scalar"].get("seeds", {}).get("score_correlation", [])
    print(f"[{task.NAME}] reward model scalar: correlation with its target (the critic's guarded scores, summed) "
          f"{rm['scalar']['score_correlation']:.3f}" + (", per seed " + " ".join(f"{v:.3f}" for v in seeded)
                                                         if len(seeded) > 1 else ""))
    for metric, d in results.get("reward_paired", {}).items():
        print(f"[{task.NAME}] {metric}, cot - no_cot over {len(rm['cot']['seeds'][metric])} reward-model seeds: "
              f"{stats.difference_text(d)}; cot "
              + " ".join(f"{v:.3f}" for v in rm["cot"]["seeds"][metric]) + ", no_cot "
              + " ".join(f"{v:.3f}" for v in rm["no_cot"]["seeds"][metric]))


def print_results(task, results):
    """The results table, the paired differences and the lambda grid."""
    methods = results["methods"]
    print(f"\n{task.NAME}: test {task.PRIMARY} (mean ± 95% interval over seeds; final validation; explained "
          f"variance of V at the last update against the GAE returns and the reward-to-go, mean over seeds)")
    for name, m in methods.items():
        per_seed = " ".join(f"{s:.3f}" for s in m["scores"])
        extra = (f"   lambda {m['lambda']:<4}  EV {stats.mean_ci95(m['explained_variance'])[0]:.2f} "
                 f"(reward-to-go {stats.mean_ci95(m['explained_variance_mc'])[0]:.2f})" if name != "sft" else "")
        print(f"  {name:17s} {m['score']:.3f} ± {m['ci95']:.3f}   validation {m['curve'][-1][1]:.3f}   "
              f"seeds: {per_seed}{extra}")
    if len(methods["text2grad"]["scores"]) < 2:
        print("  paired differences need two seeds or more: run with --seeds 5 (add --resume to keep this run)")
    else:
        print("  paired differences over seeds (95% interval):")
        for key, d in results["paired"].items():
            print(f"    {key:32s} {stats.difference_text(d)}")
        if "area" in results:
            print("  the mean height of the validation curve (its area over its updates), paired over seeds:")
            for key, d in results["area"].items():
                print(f"    {key:32s} {stats.difference_text(d)}")
    print("  GAE lambda grid, final validation at the first seed: " + "; ".join(
        f"{name} " + " ".join(f"{lam}:{score:.3f}" for lam, score in grid.items())
        for name, grid in results["lambda_grid"].items()))


def print_showcase(entries):
    """A few test prompts in the terminal: the SFT and the Text2Grad response, tokens coloured by the
    reward model's delta, each with its critique. Only on a terminal (the report has them all)."""
    if not sys.stdout.isatty() or not entries:
        return
    print("\nthe reward model's reading of a few test responses (red: delta -1, green: +1)")
    for entry in entries:
        print(f"  prompt: {entry['prompt']}")
        for name in ("sft", "text2grad"):
            side = entry[name]
            print(f"  {name + ':':10s} {colour_tokens(side['pieces'], side['reward_model']['delta'])}\n"
                  f"  {'':10s} critique: {side['reward_model']['critique']}")


def print_sweep(results):
    """The sweep's table: per K and method, test sites right, updates to each threshold, the ratios."""
    print(f"\nK sweep (facts task): test {facts.PRIMARY} after the budget (mean over {len(results['seeds'])} seeds); "
          f"updates to reach 50% / 90% of the gap from SFT to 1 on the test curves and hold it to the end (on the mean "
          f"curve, and the Kaplan-Meier median over seeds, seeds that never held it censored; -: not reached); the greedy test responses' length (the references') and share of tokens the "
          f"critic blames; on validation samples at the last update, the critic's score (gold), the method's own "
          f"reward (proxy) and the KL to the SFT policy (means)")
    for k, r in results["per_k"].items():
        m0 = r["methods"]["text2grad"]
        print(f"  K={k}  SFT {r['sft']['test'][facts.PRIMARY]:.3f}  budget {r['updates']} updates  "
              f"reference length {m0['test_reference_length']:.1f} tokens")
        for name in METHODS:
            m, steps = r["methods"][name], r["thresholds"][name]
            cells = "  ".join(("   - " if s["mean_curve"] is None else f"{s['mean_curve']:4d} ") + "KM " +
                              ("  -" if s["km_median"] is None else f"{s['km_median']:3d}") + f" ({s['censored']} censored)"
                              for s in steps.values())
            knob = f"lambda {m['lambda']:<4}" if m["lambda"] is not None else f"group {m['group']:<5}"
            print(f"    {name:15s} {knob}  test {m['score']:.3f} ± {m['ci95']:.3f}  updates {cells}  "
                  f"length {m['test_length']:4.1f}, blamed {m['test_blamed_share']:.3f}; gold {m['final_gold']:+6.2f} "
                  f"proxy {m['final_proxy']:+6.2f} KL {m['final_kl']:5.1f}")
        for q, pairs in r["ratios"].items():
            print(f"    speed at {float(q):.0%} (updates to hold it on the mean curves, a / b): " + "; ".join(
                f"{key} {v['ratio']:.2f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}]"
                + (f" (censored in {v['censored']:.0%} of resamples)" if v["censored"] else "") for key, v in pairs.items()))
        for q, pairs in r.get("seeds_faster", {}).items():
            print(f"    seed by seed at {float(q):.0%}: " + "; ".join(
                f"{key}: the second sooner on {v['b']}, the first on {v['a']}, tied {v['tied']} (sign test p = "
                f"{v['sign_p']:.3f})" for key, v in pairs.items()))
        for key, d in r["area"].items():
            print(f"    area under the test curve {key:28s} {stats.difference_text(d)}")
        for key, d in r["paired"].items():
            print(f"    paired {key:28s} {stats.difference_text(d)}")


def colour_tokens(pieces, delta):
    """Tokens' text (tokenizer.pieces) coloured by delta for a terminal (ANSI): red -1, green +1."""
    colours = {-1: "\033[41;97m", 1: "\033[42;30m"}
    return "".join(colours[d] + piece + "\033[0m" if d in colours and piece else piece for piece, d in zip(pieces, delta))
