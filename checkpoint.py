"""checkpoint.py: files that survive interruption, and stopping a run without losing work.

    atomic_save(obj, path)    write a temporary file, then rename: a file on disk is always whole
    Snapshots(path, every_s)  a training loop's resumable state (weights, optimizer, random states,
                              step), saved every every_s seconds and when Ctrl-C asks to stop
    on_sigint                 the Ctrl-C handler: the first press finishes the current step, saves
                              and stops (Interrupted); a second stops at once (KeyboardInterrupt)
    Diverged                  a NaN or infinite loss or gradient: training stops, naming the step
                              and the last good snapshot (no snapshot is ever written after it)

A loop resumed from a snapshot continues exactly where it stopped: the snapshot holds every random
state the loop draws from, so on the CPU a run stopped and resumed gives the same numbers as one
that was never stopped.
"""
import os
import sys
import time

import torch

import parallel


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
