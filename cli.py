"""cli.py: the command line of text2grad.py. The experiment itself is text2grad.run.

    python text2grad.py [--task summarize|code|qa|all] [--preset ...] [--seeds N] ...   the experiment
    python text2grad.py report --out DIR     rebuild DIR/report.html from DIR's results.json (report.py)
    python text2grad.py sweep ...            the K sweep (sweep.py)

Bad flags and bad input end with one line on stderr and exit status 2; Ctrl-C stops after the
current step with every file complete (exit 130), and --resume goes on from there.
"""
import argparse
import os
import signal
import sys

import report
import text2grad
from checkpoint import Diverged, Interrupted, on_sigint
from reward import read_annotations
from runstate import checked, fail


def add_run_flags(parser):
    """The flags every training command shares (this one and the K sweep's)."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                        help="torch.compile the PPO loss path (default off: at this vocabulary it is a small "
                             "share of a PPO step, and a first run should not need a C++ toolchain; bench.py "
                             "measures what it buys)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out: finished stages are "
                        "loaded, a stopped training loop continues from its last snapshot")
    parser.add_argument("--checkpoint-every", type=float, default=60.0, metavar="SECONDS",
                        help="how often a training loop saves its snapshot for --resume (default 60)")


def check_run_flags(args):
    """One line and exit status 2 for flags no run can use; then Ctrl-C stops after the current step."""
    if args.seeds < 1:
        fail("--seeds must be at least 1")
    if args.checkpoint_every < 0:
        fail("--checkpoint-every must be 0 or more seconds")
    if args.resume and not os.path.isdir(args.out):
        fail(f"--resume: {args.out} does not exist, so there is nothing to resume; run without --resume")
    signal.signal(signal.SIGINT, on_sigint)
    return args


def main(argv=None):
    """python text2grad.py [report | sweep] ...: parse the flags, run each task, end bad input with one line."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        return report.main(argv[1:])
    if argv[:1] == ["sweep"]:
        import sweep  # the K sweep (sweep.py) imports this module
        return sweep.main(argv[1:])
    parser = argparse.ArgumentParser(prog="text2grad.py", description="Text2Grad against scalar PPO on a toy task, end to end.",
                                     epilog="python text2grad.py report --out DIR rebuilds DIR/report.html "
                                            "from an earlier run, without training; python value.py --out DIR "
                                            "compares value-head settings on a finished run; python text2grad.py "
                                            "sweep --help: the sweep over K, the number of flaws per response.")
    parser.add_argument("--task", default="summarize", choices=["summarize", "code", "qa", "all"],
                        help="toy task to run (default: summarize)")
    parser.add_argument("--preset", default="default", choices=sorted(text2grad.PRESETS), help="run size")
    parser.add_argument("--seeds", type=int, default=1, help="PPO runs per method at its chosen GAE lambda, seeds "
                        "--seed, --seed+1, ... (default 1, to stay within 10 minutes; RESULTS.md's experiment uses "
                        "5; --resume with more seeds adds runs to a finished run)")
    parser.add_argument("--out", default="runs", help="output directory (one sub-folder per task)")
    parser.add_argument("--annotations", metavar="DIR", help="read annotations_{train,validation,test}.jsonl "
                        "from DIR instead of sampling the SFT policy and running the critic")
    parser.add_argument("--reward-start", default="sft", choices=["sft", "references"],
                        help="the reward models' trunk: the SFT policy (default), or a policy trained the same way "
                        "on the references, the demonstrations without their flaws")
    parser.add_argument("--reward-seeds", type=int, default=1, help="train the span reward models (cot and no_cot) "
                        "with this many seeds, to compare them beyond seed-to-seed variation; PPO uses the first "
                        "(default 1)")
    add_run_flags(parser)
    args = check_run_flags(parser.parse_args(argv))
    if args.reward_seeds < 1:
        fail("--reward-seeds must be at least 1")
    tasks = ["summarize", "code", "qa"] if args.task == "all" else [args.task]
    folders = {name: os.path.join(args.annotations, name) if args.task == "all" else args.annotations
               for name in tasks} if args.annotations else {}
    for folder in folders.values():  # every task's annotation files, checked before any work
        checked(read_annotations, folder)
    for name in tasks:
        try:
            per_task = {"task": name, "out": os.path.join(args.out, name), "annotations": folders.get(name)}
            text2grad.run(argparse.Namespace(**{**vars(args), **per_task}))
        except OSError as error:
            fail(f"cannot write the output ({error.strerror or error}: {error.filename or args.out}); choose another --out")
        except Interrupted as stop:
            print(f"text2grad: interrupted ({stop}); every file written is complete; run the same command "
                  f"with --resume to continue", file=sys.stderr)
            sys.exit(130)
        except KeyboardInterrupt:
            print("text2grad: interrupted at once; every file written is complete; run the same command with "
                  "--resume to continue from the last snapshot", file=sys.stderr)
            sys.exit(130)
        except Diverged as error:
            fail(f"training diverged: {error}")
    if args.task == "all":
        report.write_report(args.out)
        print(f"all tasks -> {os.path.join(args.out, 'report.html')}")
