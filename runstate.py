"""runstate.py: what a run needs to stop and resume without losing work, and how it stops on bad input.

    fail(message)              one line on stderr and exit status 2, never a traceback
    checked(function, ...)     function's result, or its ValueError's line through fail
    pick_device(name)          "auto" or a device torch can use here
    add_run_flags, check_run_flags   the flags every training command shares (--seed, --device,
                               --compile, --resume, --checkpoint-every) and their checks
    atomic_save(obj, path)     write a temporary file, then rename: a file on disk is always whole
    Snapshots(path, every_s)   a training loop's resumable state (weights, optimizer, random states,
                               step), saved every every_s seconds and when Ctrl-C asks to stop
    on_sigint                  the Ctrl-C handler: the first press finishes the current step, saves
                               and stops (Interrupted); a second stops at once (KeyboardInterrupt)
    Diverged                   a NaN or infinite loss or gradient: training stops, naming the step
                               and the last good snapshot (no snapshot is ever written after it)
    Progress(out, identity, resume, every_s)   progress.json: the stages finished and what they
                               measured, so that --resume skips them

A loop resumed from a snapshot continues exactly where it stopped: the snapshot holds every random
state the loop draws from, so on the CPU a run stopped and resumed gives the same numbers as one
that was never stopped. A trained model handed from one stage to the next is a checkpoint
(checkpoint.py). text2grad.py and the studies in experiments/ build their stages on these.
"""
import argparse
import glob
import json
import os
import signal
import sys
import time

import torch

import parallel


def fail(message):
    """Bad input ends the run with one line on stderr and exit status 2, never a traceback."""
    prefix = f"text2grad (rank {parallel.rank()})" if parallel.world_size() > 1 else "text2grad"
    print(f"{prefix}: error: {message}", file=sys.stderr)
    sys.exit(2)


def checked(function, *args, **kwargs):
    """function(*args, **kwargs); a ValueError it raises (one line naming the bad input) ends the run."""
    try:
        return function(*args, **kwargs)
    except ValueError as error:
        fail(str(error))


def pick_device(name):
    """The device to run on; a device torch cannot use ends the run before any work is done.

    A CUDA device is checked by count, without touching it: under torchrun every rank would
    otherwise create a context on cuda:0 before parallel.init moves it to its own GPU. On CUDA,
    float32 matmuls may use TF32 (a 10-bit mantissa, as the bf16 forward's are coarser still)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        fail(f"--device {name} is not a device name; try cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count():
            fail(f"--device {name} is not available here ({torch.cuda.device_count()} CUDA devices); "
                 "try --device cpu")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return name
    try:
        torch.zeros(1, device=device)
    except (RuntimeError, ValueError, AssertionError) as error:
        fail(f"--device {name} is not available here ({type(error).__name__}); try --device cpu")
    return name


# ---------------------------------------------------------------------------------------------
# Files that survive interruption, and stopping without losing work

class Interrupted(Exception):
    """Ctrl-C asked the run to stop; the message says what was saved."""


class Diverged(RuntimeError):
    """The loss or the gradient stopped being finite."""


_stop = {"requested": False}


def on_sigint(signum, frame):
    if _stop["requested"]:
        raise KeyboardInterrupt
    _stop["requested"] = True
    print("\nstopping after this step; Ctrl-C again to stop at once", file=sys.stderr)


def stop_requested():
    return _stop["requested"]


def atomic_save(obj, path):
    """Write to a temporary file, then rename: an interrupted save never leaves a half-written file.
    Strings are written as UTF-8 text, anything else with torch.save.
    Under torchrun, rank 0 writes and every rank waits for the file (parallel.py)."""
    if parallel.main_process():
        tmp = f"{path}.tmp"
        if isinstance(obj, str):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(obj)
        else:
            torch.save(obj, tmp)
        os.replace(tmp, path)
    parallel.barrier()


class Snapshots:
    """The resumable state of one training loop in one file. path None: nothing is saved, but a
    Ctrl-C still stops the loop cleanly after its current step."""

    def __init__(self, path=None, every_s=60.0):
        self.path, self.every_s, self.last_time, self.last_step = path, every_s, time.monotonic(), None

    def load(self):
        """The saved state, or None when there is none."""
        if self.path is None or not os.path.exists(self.path):
            return None
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        self.last_step = state["step"]
        return state

    def step_done(self, step, make_state):
        """Call after each finished step (step = steps done so far). Saves make_state() when due or
        when a stop was asked for; then, for a stop, raises Interrupted."""
        stop = parallel.any_rank(stop_requested())
        if self.path is not None and (stop or time.monotonic() - self.last_time >= self.every_s):
            atomic_save({**make_state(), "step": step}, self.path)
            self.last_time, self.last_step = time.monotonic(), step
        if stop:
            raise Interrupted(f"stopped after step {step}" + (f", saved to {self.path}" if self.path else ""))

    def check_finite(self, what, value, step, desc):
        """Raise Diverged if value (a float) is NaN or infinite, on this rank or any other."""
        if parallel.any_rank(value != value or value in (float("inf"), float("-inf"))):
            self.diverged(f"{what} is {value}", step, desc)

    def diverged(self, what, step, desc):
        """Raise Diverged: what went wrong, at which step, and where the last good state is."""
        saved = (f"the last good snapshot is {self.path} (step {self.last_step})" if self.last_step is not None
                 else "no snapshot of this stage was saved; the stage's inputs on disk are untouched")
        raise Diverged(f"{desc}: {what} at step {step}; {saved}")

    def clear(self):
        """The loop finished and its result is saved elsewhere: remove the snapshot."""
        if self.path is not None and os.path.exists(self.path):
            os.remove(self.path)


# ---------------------------------------------------------------------------------------------
# The stages a run has finished

class Progress:
    """progress.json in the output folder: the stages already finished and what they measured, so
    that --resume skips them. A stage writes its own files first, then is marked finished here
    (atomically). Training loops inside a stage keep a snapshot, {name}.partial.pt, that --resume
    continues from. After each stage, a pending Ctrl-C stops the run (Interrupted)."""

    def __init__(self, out, identity, resume, every_s):
        self.out, self.identity, self.every_s, self.done = out, identity, every_s, {}
        self.path = os.path.join(out, "progress.json")
        if resume and not os.path.exists(self.path):  # this task never finished a stage (--task all)
            print(f"--resume: {out} has no finished stage; starting it from the beginning")
            resume = False
        if not resume:
            for stale in glob.glob(os.path.join(out, "*.partial.pt")) if parallel.main_process() else []:
                os.remove(stale)
            parallel.barrier()
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                saved = json.load(f)
            old, self.done = saved["identity"], saved["done"]
        except (ValueError, KeyError, TypeError):
            fail(f"--resume: {self.path} is damaged; run without --resume to start again")
        for key, value in identity.items():
            if key not in old:
                fail(f"--resume: {out} was made by an older version of text2grad (its progress.json has no "
                     f"{key}); run without --resume, or use another --out")
            if old.get(key) != value:
                fail(f"--resume: {out} was started with {key} {old.get(key)!r}, not {value!r}; resume with "
                     f"the same flags, or use another --out")

    def __contains__(self, stage):
        return stage in self.done

    def __getitem__(self, stage):
        return self.done[stage]["value"]

    def time(self, stage):
        return self.done[stage]["time_s"]

    def finish(self, stage, value, start):
        self.done[stage] = {"value": value, "time_s": time.time() - start}
        atomic_save(json.dumps({"identity": self.identity, "done": self.done}), self.path)
        if parallel.any_rank(stop_requested()):
            raise Interrupted(f"stopped after the stage {stage}")

    def snapshots(self, name):
        """The snapshot of a training loop. Under torchrun there is none: each rank's random states
        differ, so an interrupted loop starts over on --resume (finished stages are still skipped)."""
        return Snapshots(os.path.join(self.out, f"{name}.partial.pt") if parallel.world_size() == 1 else None,
                         self.every_s)


# ---------------------------------------------------------------------------------------------
# The flags every training command shares

def add_run_flags(parser):
    """The flags every training command shares (text2grad.py and the K sweep)."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                        help="torch.compile the PPO loss path (default off: at this vocabulary it is a small "
                             "share of a PPO step, and a first run should not need a C++ toolchain; experiments/bench.py "
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
