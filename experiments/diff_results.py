"""experiments/diff_results.py: two runs' results.json compared leaf by leaf, times aside.

    python -m experiments.diff_results RUN_A RUN_B      # two --out folders (one sub-folder per task)

What a refactoring must leave alone: every number a run records. Prints each leaf that differs or is
in one run only (a leaf: a path of keys and list indices to a number, string or null), and exits 1
if any differs. Wall-clock times (keys ending in time_s), the device and where the run came from
(its command, commits, machine and units: experiments/fanout.py) are not compared.
"""
import argparse
import glob
import json
import os
import sys

SKIPPED = ("time_s", "device", "command", "commits", "machine", "units")


def leaves(value, path=()):
    """{path: leaf} of a JSON value."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in leaves(item, path + (key,)).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, path + (i,)).items()}
    return {path: value}


def compare(a, b):
    """(differing paths, paths in a only, paths in b only), SKIPPED aside."""
    keep = lambda path: not any(str(p).endswith(SKIPPED) for p in path)
    la, lb = ({p: v for p, v in leaves(x).items() if keep(p)} for x in (a, b))
    same = lambda x, y: x == y or x != x and y != y  # NaN is NaN (GRPO's runs have no value head)
    return ([p for p in la if p in lb and not same(la[p], lb[p])], [p for p in la if p not in lb],
            [p for p in lb if p not in la])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.diff_results", description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    args = parser.parse_args(argv)
    differ = False
    for path_a in sorted(glob.glob(os.path.join(args.a, "*", "results.json"))):
        path_b = os.path.join(args.b, os.path.relpath(path_a, args.a))
        if not os.path.exists(path_b):
            print(f"{path_b}: missing")
            differ = True
            continue
        with open(path_a, encoding="utf-8") as fa, open(path_b, encoding="utf-8") as fb:
            changed, only_a, only_b = compare(json.load(fa), json.load(fb))
        print(f"{os.path.relpath(path_a, args.a)}: {len(changed)} leaves differ, {len(only_a)} only in {args.a}, "
              f"{len(only_b)} only in {args.b}")
        for label, paths in (("differs", changed), (f"only in {args.a}", only_a), (f"only in {args.b}", only_b)):
            for p in paths[:20]:
                print(f"  {label}: {'/'.join(map(str, p))}")
        differ = differ or bool(changed or only_a or only_b)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
