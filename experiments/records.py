"""experiments/records.py: the format of what a lab command's tables read, kept in the repository
under results/.

A run folder holds checkpoints and samples (git-ignored, and gone once its machine is); a record holds
the numbers RESULTS.md's tables read: per seed and method the curves, the test scores and the measures
beside them (a protocol run's also its reward models' fit), and where they came from (the commits
and the machine; the command and config where the command knows them).

    python -m experiments.report --from results/NAME.json     # the run's RESULTS tables, no model

    write(path, record)    save a record (a dict with "kind"), keeping results/ at most LIMIT bytes
    read(path)             a record back; ValueError, one line, for anything that is not one
    writable(path)         whether a record can be written there: checked before a run's work
    interval, row, header  the cells and lines the studies' tables are written with

Each study builds its own tables from a record of its kind (`tables(record)`: [(title, markdown
lines)], from the per-seed numbers alone); report.py reads a record and calls them. This file
imports no study, so no study's import of it can close a circle. Kinds: "first_look"
(experiments.first_looks --record), "information" (experiments.information --record), "robustness"
(experiments.robustness --record), "protocol" (experiments.report --out DIR --record: results.json
with the revising rows beside it, the showcase left out and each run's per-update log cut to its
explained variance; its tables: experiments/protocol_record.py) and "sweep" (the same command on a
K sweep's folder: its results.json). Their keys: DETAILS.md, "Records".
"""
import json
import os

from experiments import stats
from experiments.runstate import atomic_save

LIMIT = 5 * 2 ** 20  # bytes: everything under results/ together
KINDS = ("first_look", "information", "robustness", "protocol", "sweep")


def write(path, record):
    """Save record (a dict with "kind") as JSON at path, unless the folder's files would then pass
    LIMIT bytes together: ValueError, and nothing written."""
    text = json.dumps(record, indent=1)
    folder = os.path.dirname(os.path.abspath(path))
    others = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
                 if os.path.isfile(os.path.join(folder, f)) and f != os.path.basename(path)) \
        if os.path.isdir(folder) else 0
    if others + len(text.encode()) > LIMIT:
        raise ValueError(f"{path}: {len(text.encode()) / 2 ** 20:.1f} MB would take {folder} past "
                         f"{LIMIT / 2 ** 20:.0f} MB; leave out what no table reads")
    os.makedirs(folder, exist_ok=True)
    atomic_save(text, path)


def writable(path):
    """Whether a record can be written at path: its folder exists and this process may write in it
    (a command checks it before hours of runs, not at the end)."""
    return os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


def read(path):
    """The record at path; ValueError with one line when it is missing, not JSON, or no record."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except OSError as error:
        raise ValueError(f"cannot read {path} ({error.strerror or error})") from None
    except ValueError:
        raise ValueError(f"{path} is not JSON") from None
    except RecursionError:  # JSON nested deeper than Python's parser goes
        raise ValueError(f"{path} is not a record (nested too deep)") from None
    if not isinstance(record, dict) or record.get("kind") not in KINDS:
        raise ValueError(f"{path} is not a record (no kind among {', '.join(KINDS)})")
    return record


def interval(values, digits=3, groups=None):
    """ "mean ± half-width" of the 95% t-interval over the values; with groups (the reward model
    each run read), over the units: the runs on one model averaged first. One unit: its mean alone."""
    units = stats.unit_means(values, groups)
    if len(units) < 2:
        return f"{units[0]:.{digits}f} (1 unit)"
    mean, half = stats.mean_ci95(units)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def row(cells):
    return "| " + " | ".join(cells) + " |"


def header(cells):
    return [row(cells), row(["---"] * len(cells))]
