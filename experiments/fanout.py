"""experiments/fanout.py: the lab's units of work, one after another or as Ray tasks (--ray).

A study is a loop over units (a seed, a grid point, a PPO run, a reward model). It hands each unit
to Units.submit and reads what the units returned with Units.wait:

    with Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus) as units:
        done = units.wait({seed: units.submit(f"seed {seed}", one_seed, seed, ...) for seed in seeds})

Without --ray a unit runs where it is submitted, in this process, as the plain loop did, and
nothing imports Ray. With --ray (a new local cluster) or --ray ADDRESS (an existing one) each unit
is a Ray task asking for --unit-cpus CPUs (its torch threads too, 1 by default) and, on CUDA,
--unit-gpus of a GPU. A handle passed to a later submit stands for what its unit returned: Ray
starts the later unit once the earlier is done, so stages that depend on each other are a graph.
A unit's printing goes to OUT/units/<unit>.txt; the command shows one bar over the units and at the
end where each ran and for how long (Units.record). A worker that dies costs its unit only (Ray
starts it again, RETRIES); a unit's own failure ends the run once, with its one line; Ctrl-C
ends the tasks, every file whole for the command's resume. DETAILS.md, "The lab on Ray".
"""
import contextlib
import importlib
import os
import re
import socket
import sys
import time
import traceback

from experiments.runstate import Failed, commit, fail

RETRIES = 3  # times Ray starts a unit again after its worker died, before the run fails
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_flags(parser):
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="run the units as Ray tasks: on a new local cluster of this machine's CPUs "
                             "(--ray), or on an existing cluster (--ray auto, or its address); needs pip "
                             "install -r experiments/requirements-ray.txt; Ray's servers listen on every "
                             "interface, token-protected (DETAILS.md, The lab on Ray)")
    parser.add_argument("--unit-cpus", type=int, default=1,
                        help="with --ray: the CPUs each unit asks for, and its torch threads (default 1)")
    parser.add_argument("--unit-gpus", type=float, default=None,
                        help="with --ray on CUDA: the share of a GPU each unit asks for (default 0.25)")


def check_flags(parser, args):
    """One line and exit status 2 for settings no unit can run with, before any work."""
    if args.unit_cpus < 1:
        parser.error("--unit-cpus must be at least 1")
    if args.unit_gpus is not None and not 0 <= args.unit_gpus <= 1:
        parser.error("--unit-gpus must be between 0 and 1 (a share of one GPU)")
    if args.ray is not None and str(args.device).startswith("cuda:"):  # a worker sees its GPU only
        parser.error(f"--ray picks each unit's GPU: --device cuda, not {args.device}")


class Outcome:
    """What a unit returned (value), or the one line it failed with (failure), and where it ran."""

    def __init__(self, value, failure=None, where=None):
        self.value, self.failure, self.where = value, failure, where


class Units:
    """The units of one command: in sequence (ray None) or as Ray tasks (ray "local" or an address).
    out: the command's --out (units' printing goes to out/units/); device: the units' (a GPU share
    is asked for on CUDA only); cluster_cpus: a local cluster's CPUs (default: every CPU)."""

    def __init__(self, ray=None, out=".", cpus=1, gpus=None, device="cpu", cluster_cpus=None):
        self.ray, self.out, self.cpus, self.cluster_cpus = ray, os.path.abspath(out), cpus, cluster_cpus
        self.gpus = (0.25 if str(device).startswith("cuda") else 0.0) if gpus is None else gpus
        self.times, self.pending, self.waits_for, self.bar = [], {}, {}, None

    def __enter__(self):
        if self.ray is None:
            return self
        if self.ray != "local":  # joining: send the cluster's token (a new local cluster makes one)
            os.environ.setdefault("RAY_AUTH_MODE", "token")
        try:
            import ray
        except ImportError:
            fail("--ray needs Ray: pip install -r experiments/requirements-ray.txt")
        from tqdm import tqdm
        env = {"MKL_CBWR": os.environ.get("MKL_CBWR", "AUTO"), "TEXT2GRAD_COMMIT": commit(),
               "TQDM_DISABLE": "1"}
        runtime_env = {"env_vars": env}
        if self.ray != "local":  # another machine's workers need the code: Ray ships this folder
            runtime_env.update(working_dir=PROJECT, excludes=[".git", "runs", "*.pt"])
        local = {"num_cpus": self.cluster_cpus} if self.ray == "local" else {}  # default: every CPU
        try:  # "local": a new cluster, never one that happens to run here already
            ray.init(address=self.ray, include_dashboard=False, log_to_driver=False,
                     runtime_env=runtime_env, logging_level="ERROR", **local)
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as error:
            fail(f"--ray {self.ray}: cannot reach the cluster ({first_line(error)})")
        nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]  # a unit runs on one node
        if not any(n.get("CPU", 0) >= self.cpus and n.get("GPU", 0) >= self.gpus for n in nodes):
            most = max(nodes, key=lambda n: (n.get("GPU", 0), n.get("CPU", 0)), default={})
            ray.shutdown()  # else a unit would wait forever
            fail(f"--ray {self.ray}: a unit asks for {self.cpus} CPUs and {self.gpus:g} GPUs, no node has "
                 f"them (the largest: {most.get('CPU', 0):g} and {most.get('GPU', 0):g}); lower --unit-cpus "
                 "or --unit-gpus")
        self.task, self.ref = ray.remote(run_unit), ray.ObjectRef
        self.bar = tqdm(total=0, desc="units", unit="unit", file=sys.stderr)
        return self

    def __exit__(self, kind, error, trace):
        if self.ray is not None:
            import ray
            self.bar.close()
            # no task goes on without the command: Ray ends a job's tasks with its driver (cancelling
            # each first can meet a task finishing, which Ray 2.60's core worker does not survive)
            with contextlib.suppress(Exception):  # the run's own end (Ctrl-C, a failed unit) stands
                ray.shutdown()
            self.pending = {}
        return False

    def submit(self, label, function, *args, **kwargs):
        """Run function(*args, **kwargs) as the unit `label`: now, in sequence; as a Ray task under
        --ray. A positional argument that is another unit's handle (itself, not inside a list)
        stands for what that unit returned."""
        if self.ray is None:
            start = time.time()
            value = function(*[a.value if isinstance(a, Outcome) else a for a in args], **kwargs)
            self.times.append(where(label, start))
            return Outcome(value)
        ref = self.task.options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=RETRIES,
                                name=label).remote(function, label, self.cpus, self.out, *args, **kwargs)
        self.pending[ref] = label
        self.waits_for[ref] = [a for a in args if isinstance(a, self.ref) and a in self.pending]
        self.bar.total += 1
        self.bar.refresh()
        return ref

    def wait(self, handles):
        """What the units of `handles` (a dict or a list of submit's handles) returned, in the same
        shape. Under Ray, as they finish (and the units they wait for): the first that failed ends
        the run with its line, every other task ended with it."""
        keys = list(handles) if isinstance(handles, dict) else range(len(handles))
        if self.ray is not None:
            import ray
            asked = [handles[k] for k in keys if not isinstance(handles[k], Outcome)]
            waiting = list(dict.fromkeys(ref for h in asked for ref in [*self.waits_for.get(h, []), h]
                                         if ref in self.pending))
            while waiting:
                try:
                    ready, waiting = ray.wait(waiting, num_returns=1)
                except KeyboardInterrupt:
                    self.bar.close()  # Ctrl-C's line below the bar, not after it
                    raise
                try:
                    outcome = ray.get(ready[0])
                except ray.exceptions.RayError as error:  # its worker died RETRIES + 1 times
                    self.bar.close()
                    fail(f"{self.pending[ready[0]]}: {first_line(error)}")
                self.times.append(outcome.where)
                self.bar.update(1)
                if outcome.failure is not None:
                    self.bar.close()  # the line below the bar, not after it
                    fail(f"{self.pending.pop(ready[0])}: {outcome.failure}")
                self.pending.pop(ready[0])
        values = [handles[k] if isinstance(handles[k], Outcome) else ray.get(handles[k]) for k in keys]
        values = [v.value for v in values]
        return dict(zip(keys, values)) if isinstance(handles, dict) else values

    def share(self, value):
        """value as an argument of many units: under Ray put in the cluster's store once."""
        return value if self.ray is None else __import__("ray").put(value)

    def label(self, folder, name):
        """name, led by where folder sits under --out (a task's, a K's): labels never meet."""
        where = os.path.relpath(os.path.abspath(folder), self.out)
        return name if where == "." else f"{where}/{name}"

    def record(self, folder=None):
        """[{"unit", "node", "pid", "seconds"}] of every unit (with folder: those labelled under it)."""
        lead = "" if folder is None else self.label(folder, "")
        return [t for t in self.times if t["unit"].startswith(lead)]

    def report(self):
        """Each unit, where it ran and for how long."""
        print(f"\n{len(self.times)} units, {sum(t['seconds'] for t in self.times):.0f} s in all:")
        for t in self.times:
            print(f"  {t['unit']:40s} {t['node']} pid {t['pid']:<7d} {t['seconds']:7.1f} s")


def first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def where(label, start):  # a unit's entry in the record
    return {"unit": label, "node": socket.gethostname(), "pid": os.getpid(),
            "seconds": round(time.time() - start, 2)}


def run_unit(function, label, threads, out, *args, **kwargs):
    """The Ray task: function(*args, **kwargs) at `threads` torch threads, its printing appended to
    out/units/<label>.txt; an argument that is an Outcome stands for its value."""
    import torch
    start = time.time()
    for a in args:
        if isinstance(a, Outcome) and a.failure is not None:
            return Outcome(None, f"waits for a unit that failed: {a.failure}", where(label, start))
    args = [a.value if isinstance(a, Outcome) else a for a in args]
    torch.set_num_threads(threads)
    os.makedirs(os.path.join(out, "units"), exist_ok=True)
    path = os.path.join(out, "units", re.sub(r"[^A-Za-z0-9_.=-]+", "_", label) + ".txt")
    with open(path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        print(f"unit {label}: pid {os.getpid()} on {socket.gethostname()}", flush=True)
        try:
            value, failure = function(*args, **kwargs), None
        except Failed as error:              # fail(): bad input, said in one line
            value, failure = None, error.message
        except SystemExit as error:          # an exit inside a task would be a worker's death
            value, failure = None, f"exited with status {error.code}"
        except FloatingPointError as error:  # as run_to_the_end says it in sequence
            value, failure = None, f"training diverged: {first_line(error)}"
        except Exception as error:           # a bug: its traceback kept in the unit's file
            traceback.print_exc()
            value, failure = None, f"{type(error).__name__}: {first_line(error)} (traceback: {path})"
        print(f"unit {label}: {'failed: ' + failure if failure else 'done'} after "
              f"{time.time() - start:.1f} s", flush=True)
    return Outcome(value, failure, where(label, start))


# PLUMBING: what a unit costs beside its work (python -m experiments.fanout; DETAILS.md)

def overhead(cpus=2, rounds=100):
    """{figure: seconds} on a local cluster of `cpus` CPUs: its start, a unit on a fresh worker (a
    first look's imports) and a warm one, an empty unit and one handed the SFT policy (medians)."""
    import ray
    from model import GPT, GPTConfig
    from text2grad import Config
    c = Config()
    policy = GPT(GPTConfig(vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd))

    def timed(task, *args):
        start = time.perf_counter()
        ray.get(task.remote(*args))
        return time.perf_counter() - start
    start = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    figures = {"cluster start": time.perf_counter() - start}
    unit, echo = ray.remote(importlib.import_module), ray.remote(lambda value: value)
    figures["a first look's unit, fresh worker"] = timed(unit, "experiments.first_looks")
    figures["the same, warm worker"] = timed(unit, "experiments.first_looks")
    figures["empty unit"] = sorted(timed(echo, 0) for _ in range(rounds))[rounds // 2]
    figures["the SFT policy there and back"] = sorted(timed(echo, policy) for _ in range(rounds))[rounds // 2]
    figures["its size, MB"] = sum(p.numel() * p.element_size() for p in policy.parameters()) / 2 ** 20
    ray.shutdown()
    return figures


if __name__ == "__main__":
    for name, value in overhead().items():
        print(f"{name:34s} {value:.4f}")
