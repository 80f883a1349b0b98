"""experiments/runstate.py: what a run of the lab needs to stop and resume, and how it stops on bad input.

    fail(message)              one line on stderr and exit status 2 (Failed), never a traceback
    checked(function, ...)     function's result, or its ValueError's line through fail
    pick_device(name)          "auto" or a device torch can use here
    add_run_flags, check_run_flags   the flags the lab's training commands share (--seed, --device,
                               --compile, --resume) and their checks
    atomic_save(obj, path)     write a temporary file, then rename: a file on disk is always whole
    Progress(out, identity, resume)   progress.json: the stages finished and what they measured, so
                               that --resume skips them (units in other processes finish theirs too)

Resume is by stage: a stage writes its files, then is marked finished. Ctrl-C stops a run at once;
every file written is whole, and --resume runs the stopped stage again from its start, to the same
numbers as a run never stopped, to float32 rounding (DETAILS.md, Precision).
"""
import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

import torch

import model

try:
    import fcntl  # the lock progress.json's writers take (POSIX); elsewhere units run one at a time
except ImportError:
    fcntl = None


class Failed(SystemExit):
    """fail()'s exit, status 2, with its line kept: a unit run as a Ray task hands it back to the
    command, which ends the run with it once (an exit inside a task would read as a dead worker)."""

    def __init__(self, message):
        super().__init__(2)
        self.message = message


def fail(message):
    """Bad input ends the run with one line on stderr and exit status 2, never a traceback."""
    print(f"text2grad: error: {message}", file=sys.stderr)
    raise Failed(message)


def checked(function, *args, **kwargs):
    """function(*args, **kwargs); a ValueError it raises (one line naming the bad input) ends the run."""
    try:
        return function(*args, **kwargs)
    except ValueError as error:
        fail(str(error))


def pick_device(name):
    """The device to run on (model.pick_device: auto is CUDA, then MPS, then the CPU); a device
    torch cannot use ends the run, in one line, before any work is done."""
    return checked(model.pick_device, name)


# ---------------------------------------------------------------------------------------------
# Files that survive interruption, and stopping without losing work

UMASK = os.umask(0o022)  # the process's file mode mask, read once at import (reading it sets
os.umask(UMASK)          # it, which no thread should meet mid-save)


def atomic_save(obj, path):
    """Write to a temporary file of this call's own beside path, then rename: an interrupted save
    never leaves a half-written file, and two processes saving at once never share a temporary
    file. Strings are written as UTF-8 text, anything else with torch.save."""
    handle, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                                   dir=os.path.dirname(os.path.abspath(path)))
    os.chmod(tmp, 0o666 & ~UMASK)  # as open() would have made it, not mkstemp's owner-only
    try:
        with os.fdopen(handle, "w" if isinstance(obj, str) else "wb",
                       **({"encoding": "utf-8"} if isinstance(obj, str) else {})) as f:
            if isinstance(obj, str):
                f.write(obj)
            else:
                torch.save(obj, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# ---------------------------------------------------------------------------------------------
# Where a number came from

def machine():
    """The CPU's model name (or the platform's) and the number of threads torch uses."""
    name = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        name)
    return f"{name}, {torch.get_num_threads()} threads"


def commit():
    """The commit the code runs at ("+changes" if the tracked files differ from it); in a Ray
    worker, the commit of the command that sent it the code (TEXT2GRAD_COMMIT, experiments/fanout.py)."""
    if os.environ.get("TEXT2GRAD_COMMIT"):
        return os.environ["TEXT2GRAD_COMMIT"]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project's, wherever it is run from
    run = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True, cwd=here).stdout.strip()
    try:
        head, dirty = run("rev-parse", "--short", "HEAD"), run("status", "--porcelain", "--untracked-files=no")
    except OSError:  # no git on this machine
        return "unknown"
    return (head or "unknown") + ("+changes" if dirty else "")


# ---------------------------------------------------------------------------------------------
# The stages a run has finished

class Progress:
    """progress.json in the output folder: the stages finished and what they measured, so that
    --resume skips them. A stage writes its own files first, then is marked finished here. Units in
    other processes (experiments/fanout.py) finish stages of the same folder at once: each finish
    adds its stage under a lock, and a read sees the file as it is now."""

    def __init__(self, out, identity, resume):
        self.out, self.identity = out, identity
        self.commit = commit()  # the code this process loaded: a commit made while it runs is not it
        self.path = os.path.join(out, "progress.json")
        if resume and not os.path.exists(self.path):  # this task never finished a stage (--task all)
            print(f"--resume: {out} has no finished stage; starting it from the beginning")
            resume = False
        if not resume:  # a new run: what an earlier one finished here is not this run's
            atomic_save(json.dumps({"identity": identity, "done": {}}), self.path)
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                old = json.load(f)["identity"]
            self.done  # read, and checked to be readable
        except (ValueError, KeyError, TypeError):
            fail(f"--resume: {self.path} is damaged; run without --resume to start again")
        for key, value in identity.items():
            if key not in old:
                fail(f"--resume: {out} was made by an older version of text2grad (its progress.json has no "
                     f"{key}); run without --resume, or use another --out")
            if old.get(key) != value:
                fail(f"--resume: {out} was started with {key} {old.get(key)!r}, not {value!r}; resume with "
                     f"the same flags, or use another --out")

    @property
    def done(self):
        """{stage: {"value", "time_s", "commit"[, "of"]}}, read afresh: other processes add to it."""
        with open(self.path, encoding="utf-8") as f:
            return json.load(f)["done"]

    def __contains__(self, stage):
        return stage in self.done

    def __getitem__(self, stage):
        return self.done[stage]["value"]

    def time(self, stage):
        return self.done[stage]["time_s"]

    def commits(self):
        """The commits the finished stages ran at (commit() as their process started)."""
        return sorted({entry["commit"] for entry in self.done.values()})

    def made_of(self, stage, of):
        """Whether a finished stage was computed from `of` (finish's of)."""
        return self.done[stage].get("of") == of

    def finish(self, stage, value, start, of=None):
        """Mark stage done with its value; of: what it was computed from (the test of a chosen lambda
        or group), so a resume whose choice has changed can tell the value is stale (made_of)."""
        entry = {"value": value, "time_s": time.time() - start, "commit": self.commit,
                 **({"of": of} if of is not None else {})}
        with open(self.path + ".lock", "w") as lock:  # one writer at a time: read, add, replace
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            done = {**self.done, stage: entry}
            atomic_save(json.dumps({"identity": self.identity, "done": done}), self.path)


# ---------------------------------------------------------------------------------------------
# The flags every training command shares

def add_run_flags(parser):
    """The flags the lab's training commands share (experiments.protocol and the K sweep)."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                        help="torch.compile the PPO loss path (default off: at this vocabulary it is a small "
                             "share of a PPO step, and a first run should not need a C++ toolchain; experiments/bench.py "
                             "measures what it buys)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out: finished stages are "
                        "loaded, a stopped stage runs again")


def run_to_the_end(run, out, name="text2grad", resume="with --resume"):
    """run() with its ends as one line each: an output that cannot be written, Ctrl-C (exit status
    130; the same command `resume` goes on from the last finished stage) and a loss that stopped
    being finite."""
    try:
        return run()
    except OSError as error:
        fail(f"cannot write the output ({error.strerror or error}: {error.filename or out}); choose another --out")
    except KeyboardInterrupt:
        print(f"{name}: interrupted; every file written is complete; run the same command {resume} to "
              f"continue from the last finished stage", file=sys.stderr)
        sys.exit(130)
    except FloatingPointError as error:
        fail(f"training diverged: {error}")


def check_run_flags(args):
    """One line and exit status 2 for flags no run can use; then Ctrl-C stops the run (KeyboardInterrupt),
    even where the shell that started it ignores it (a background job)."""
    if args.seeds < 1:
        fail("--seeds must be at least 1")
    if args.resume and not os.path.isdir(args.out):
        fail(f"--resume: {args.out} does not exist, so there is nothing to resume; run without --resume")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return args
