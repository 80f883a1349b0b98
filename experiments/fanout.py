"""experiments/fanout.py: the lab's units of work, one after another or as Ray tasks (--ray).

A study is a loop over units (a seed, a grid point, a PPO run, a reward model). It hands each unit
to Units.submit and reads the results back with Units.wait:

    units = Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus, device=...)
    with units:
        handles = {seed: units.submit(f"seed {seed}", one_seed, seed, ...) for seed in seeds}
        done = units.wait(handles)           # {seed: what one_seed returned}

Without --ray a unit runs where it is submitted, in this process, as the plain loop did, and
nothing here imports Ray. With --ray (a local cluster on this machine) or --ray ADDRESS (an
existing one: `ray start --head` first, then `--ray auto` or the address it prints) each unit is a
Ray task that asks for --unit-cpus CPUs (its torch threads too, 1 by default) and, on CUDA,
--unit-gpus of a GPU, so that many tiny runs share one card. A handle passed to a later submit is
what that unit returned: Ray starts the later unit once the earlier one is done, so stages that
depend on each other form a graph of tasks.

Under Ray a unit's printing and bars go to OUT/units/<unit>.txt (each attempt appended); the
command shows one bar over the units as they finish, and at the end which units ran where and how
long each took (Units.record, which the commands keep with their results). A worker that dies
(killed, out of memory) costs its unit only: Ray starts it again (RETRIES), from its beginning or from the last
stage its files say is finished. A unit that fails for a reason of its own (bad input, a loss that
stopped being finite) ends the run once, with its one line. Ctrl-C cancels the tasks and leaves
every file whole, for the command's own resume.
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
    """--ray [ADDRESS], --unit-cpus and --unit-gpus, for the lab's commands that fan out."""
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="run the units as Ray tasks: on a new local cluster of this machine's "
                             "CPUs (--ray), or on an existing cluster (--ray auto, or the address "
                             "`ray start --head` printed); needs pip install -r "
                             "experiments/requirements-ray.txt; Ray's servers listen on every "
                             "interface, token-protected (DETAILS.md, The lab on Ray)")
    parser.add_argument("--unit-cpus", type=int, default=1,
                        help="with --ray: the CPUs each unit asks for, and its torch threads "
                             "(default 1)")
    parser.add_argument("--unit-gpus", type=float, default=None,
                        help="with --ray on CUDA: the share of a GPU each unit asks for "
                             "(default 0.25: four tiny runs to a card; 0 on the CPU)")


def check_flags(parser, args):
    """One line and exit status 2 for settings no unit can run with, before any work."""
    if args.unit_cpus < 1:
        parser.error("--unit-cpus must be at least 1")
    if args.unit_gpus is not None and not 0 <= args.unit_gpus <= 1:
        parser.error("--unit-gpus must be between 0 and 1 (a share of one GPU)")
    if args.ray is not None and args.ray != "local" and not args.ray.strip():
        parser.error("--ray ADDRESS: give the cluster's address, auto, or no address at all")


class Units:
    """Units of one command, in sequence (ray None) or as Ray tasks (ray "local" or an address).
    out: the folder the units write to (their printing goes to out/units/ under Ray); device: the
    one the units train on (a GPU share is asked for on CUDA only); cluster_cpus: a local
    cluster's CPUs (default: every CPU of this machine)."""

    def __init__(self, ray=None, out=".", cpus=1, gpus=None, device="cpu", cluster_cpus=None):
        self.ray, self.out, self.cpus, self.cluster_cpus = ray, os.path.abspath(out), cpus, cluster_cpus
        self.gpus = (0.25 if str(device).startswith("cuda") else 0.0) if gpus is None else gpus
        self.times, self.pending, self.waits_for, self.bar = [], {}, {}, None

    # PLUMBING: starting and stopping the cluster

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
        try:  # "local": a new cluster, never one that happens to run here already
            local = {"num_cpus": self.cluster_cpus} if self.ray == "local" else {}  # default: every CPU
            ray.init(address=self.ray, include_dashboard=False, log_to_driver=False,
                     runtime_env=runtime_env, logging_level="ERROR", **local)
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as error:
            fail(f"--ray {self.ray}: cannot reach the cluster ({first_line(error)})")
        have = ray.cluster_resources()
        if have.get("CPU", 0) < self.cpus or have.get("GPU", 0) < self.gpus:  # a unit would wait forever
            ray.shutdown()
            fail(f"--ray {self.ray}: a unit asks for {self.cpus} CPUs and {self.gpus:g} GPUs, the cluster has "
                 f"{have.get('CPU', 0):g} and {have.get('GPU', 0):g}; lower --unit-cpus or --unit-gpus")
        self.task = ray.remote(run_unit)
        self.bar = tqdm(total=0, desc="units", unit="unit", file=sys.stderr)
        return self

    def __exit__(self, kind, error, trace):
        if self.ray is None:
            return False
        import ray
        if self.pending:  # Ctrl-C or a failed unit: no task goes on without the command
            for ref in self.pending:
                ray.cancel(ref, force=True)
            self.pending = {}
        self.bar.close()
        ray.shutdown()
        return False

    # PLUMBING: submit and wait

    def submit(self, label, function, *args, **kwargs):
        """Run function(*args, **kwargs) as the unit `label`: now, in sequence; as a Ray task under
        --ray. A positional argument that is another unit's handle (itself, not inside a list)
        stands for what that unit returned."""
        if self.ray is None:
            start = time.time()
            value = function(*[a.value if isinstance(a, Done) else a for a in args], **kwargs)
            self.times.append(where(label, start))
            return Done(value)
        ref = self.task.options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=RETRIES,
                                name=label).remote(function, label, self.cpus, self.out, *args, **kwargs)
        for handle in args:  # a unit another waits for is waited for too: in the record, the bar
            if isinstance(handle, ray_ref()) and handle in self.pending:
                self.waits_for.setdefault(ref, []).append(handle)
        self.pending[ref] = label
        self.bar.total += 1
        self.bar.refresh()
        return ref

    def wait(self, handles):
        """What the units of `handles` (a dict or a list of submit's handles) returned, in the same
        shape. Under Ray: as they finish, one bar over them; the first unit that failed ends the
        run with its line, every other task cancelled."""
        keys = list(handles) if isinstance(handles, dict) else range(len(handles))
        if self.ray is not None:
            import ray
            asked = [handles[k] for k in keys if not isinstance(handles[k], Done)]
            waiting = list(dict.fromkeys(d for ref in asked for d in [*self.waits_for.get(ref, []), ref]
                                         if d in self.pending))
            while waiting:
                ready, waiting = ray.wait(waiting, num_returns=1)
                for ref in ready:
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as error:  # its worker died RETRIES + 1 times
                        self.bar.close()
                        fail(f"{self.pending.get(ref, 'a unit')}: {first_line(error)}")
                    self.finished(ref, outcome)
        values = [self.value(handles[k]) for k in keys]
        return dict(zip(keys, values)) if isinstance(handles, dict) else values

    def value(self, handle):
        if isinstance(handle, Done):
            return handle.value
        import ray
        return ray.get(handle).value

    def finished(self, ref, outcome):
        label = self.pending.pop(ref, None)
        if label is None:  # seen already (a handle waited for twice)
            return
        self.times.append(outcome.where)
        self.bar.update(1)
        if outcome.failure is not None:
            self.bar.close()  # the line below the bar, not after it
            fail(f"{label}: {outcome.failure}")

    def share(self, value):
        """value as an argument of many units: under Ray put in the cluster's store once (a
        handle), in sequence itself."""
        if self.ray is None:
            return value
        import ray
        return ray.put(value)

    def label(self, folder, name):
        """A unit's label: name, led by where folder sits under the command's --out (a task's,
        a K's), so that the labels of one command never meet."""
        where = os.path.relpath(os.path.abspath(folder), self.out)
        return name if where == "." else f"{where}/{name}"

    def record(self, folder=None):
        """[{"unit", "node", "pid", "seconds"}]: which units ran where and how long each took;
        with folder, those labelled under it (label) only."""
        lead = None if folder is None else self.label(folder, "")
        return [t for t in self.times if lead is None or t["unit"].startswith(lead)]

    def report(self):
        """Print the record: each unit, where it ran and for how long; one line per node."""
        if not self.times:
            return
        print(f"\n{len(self.times)} units: " + "; ".join(
            f"{node} {sum(t['node'] == node for t in self.times)} units, "
            f"{sum(t['seconds'] for t in self.times if t['node'] == node):.0f} s"
            for node in sorted({t["node"] for t in self.times})))
        for t in self.times:
            print(f"  {t['unit']:40s} {t['node']} pid {t['pid']:<7d} {t['seconds']:7.1f} s")


class Done:
    """A unit already run (in sequence): what it returned."""

    def __init__(self, value):
        self.value = value


class Outcome:
    """What a Ray task hands back: its unit's value, or the one line it failed with, and where."""

    def __init__(self, value, failure, where):
        self.value, self.failure, self.where = value, failure, where


def ray_ref():
    import ray
    return ray.ObjectRef


def first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def where(label, start):
    return {"unit": label, "node": socket.gethostname(), "pid": os.getpid(),
            "seconds": round(time.time() - start, 2)}


def run_unit(function, label, threads, out, *args, **kwargs):
    """The Ray task: function(*args, **kwargs) at `threads` torch threads, its printing into
    out/units/<label>.txt; an argument that is an Outcome is replaced by its value."""
    import torch
    start = time.time()
    for a in args:
        if isinstance(a, Outcome) and a.failure is not None:
            return Outcome(None, f"waits for a unit that failed: {a.failure}", where(label, start))
    args = [a.value if isinstance(a, Outcome) else a for a in args]
    torch.set_num_threads(threads)
    os.makedirs(os.path.join(out, "units"), exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", label)
    with open(os.path.join(out, "units", f"{name}.txt"), "a", encoding="utf-8") as log, \
            contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"unit {label}: pid {os.getpid()} on {socket.gethostname()}", flush=True)
        try:
            value, failure = function(*args, **kwargs), None
        except Failed as error:            # fail(): bad input, said in one line
            value, failure = None, error.message
        except SystemExit as error:         # an exit inside a task would be a worker's death
            value, failure = None, f"exited with status {error.code}"
        except ValueError as error:         # bad input the data shows (the lab's checked())
            value, failure = None, first_line(error)
        except FloatingPointError as error:  # as run_to_the_end says it in sequence
            value, failure = None, f"training diverged: {first_line(error)}"
        except Exception as error:          # a bug: its traceback kept in the unit's file
            traceback.print_exc()
            value, failure = None, (f"{type(error).__name__}: {first_line(error)} "
                                    f"(its traceback: {os.path.join(out, 'units', name + '.txt')})")
        print(f"unit {label}: {'failed: ' + failure if failure else 'done'} after "
              f"{time.time() - start:.1f} s", file=sys.stderr, flush=True)
    return Outcome(value, failure, where(label, start))


# PLUMBING: what a unit costs beside its work (python -m experiments.fanout; DETAILS.md, The lab on Ray)

def imported():
    """What a first look's unit imports (torch, tokenizers, the method, the lab): on a fresh worker
    its whole cost, on a worker that ran a unit before, nothing."""
    importlib.import_module("experiments.first_looks")


def echo(value):
    return value


def overhead(cpus=2, rounds=100):
    """{figure: seconds} on a local cluster of `cpus` CPUs: its start; a unit's round trip on a
    fresh worker (with the first look's imports) and on a warm one; an empty unit's round trip
    (median of `rounds`); and that of a unit handed a first look's SFT policy (Config's GPT) that
    hands it back."""
    import ray
    from model import GPT, GPTConfig
    from text2grad import Config

    def timed(task, value=None):
        start = time.perf_counter()
        ray.get(task.remote(*([] if value is None else [value])))
        return time.perf_counter() - start
    start = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    figures = {"cluster start": time.perf_counter() - start}
    unit = ray.remote(imported)
    figures["a first look's unit, fresh worker"] = timed(unit)
    figures["the same, warm worker"] = timed(unit)
    empty = ray.remote(echo)
    figures["empty unit, median"] = sorted(timed(empty, 0) for _ in range(rounds))[rounds // 2]
    c = Config()
    policy = GPT(GPTConfig(vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd,
                           block_size=c.block_size))
    figures["the SFT policy there and back, median"] = sorted(timed(empty, policy) for _ in range(rounds))[rounds // 2]
    figures["its size, MB"] = sum(p.numel() * p.element_size() for p in policy.parameters()) / 2 ** 20
    ray.shutdown()
    return figures


if __name__ == "__main__":
    for name, value in overhead().items():
        print(f"{name:40s} {value:.4f}")
