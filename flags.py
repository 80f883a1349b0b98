"""flags.py: PLUMBING, not the method. A dataclass as a command line: every field a flag, its
comment the help line, and its range checked before any work, so that a setting a run cannot use
ends in argparse's usage and one line (exit 2), not a traceback minutes into the run."""
import argparse
import dataclasses
import inspect
import math
import re

from data.tokenizer import SPECIALS
from sft import MAX_NEW_TOKENS


def field_help(cls):
    """{field name: its comment} read from cls's source, a comment continued on the lines below
    it at the same column: the comments are the one source of the help lines."""
    helps, name, column = {}, None, None
    for line in inspect.getsource(cls).splitlines():
        field = re.match(r"\s+(\w+): [^#]+#\s*(.*)", line)
        if field:
            name, column = field.group(1), line.index("#")
            helps[name] = field.group(2)
        elif name and line.find("#") == column and not line[:column].strip():
            helps[name] += " " + line[column + 1:].strip()
        else:
            name = None
    return helps


def parser(cls, prog, description, choices, others, others_name):
    """A flag per field of cls (--n-embd for n_embd), with its help line, its default and
    others[field] as others_name's; a flag not given stays out of the parsed namespace."""
    made = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    helps = field_help(cls)
    for field in dataclasses.fields(cls):
        kind = {"action": argparse.BooleanOptionalAction} if field.type is bool else {
            "type": field.type}
        default = "" if field.type is bool else f" (default: {field.default!r}" + (
            f"; {others_name}: {others[field.name]!r})" if field.name in others else ")")
        made.add_argument(f"--{field.name.replace('_', '-')}", default=argparse.SUPPRESS,
                          choices=choices.get(field.name), help=helps[field.name] + default,
                          **kind)
    return made


LOWEST = {"seed": 0, "min_new_tokens": 0, "vocab_size": 256 + len(SPECIALS)}  # else 1


def out_of_range(config):
    """The first field of config out of its range, as one line (None if none is): a count at
    least 1 (or LOWEST's), a rate above 0 and finite, lam from 0 to 1; None is not checked."""
    for field in dataclasses.fields(config):
        name, value = field.name, getattr(config, field.name)
        if value is None or field.type not in (int, float):
            continue
        if field.type is int:
            low = LOWEST.get(name, 1)  # and an EOS must stay possible:
            high = MAX_NEW_TOKENS - 1 if name == "min_new_tokens" else math.inf
            fine, what = low <= value <= high, f"at least {low}" + (
                f" and at most {high}" if high < math.inf else "")
        elif name == "lam":
            fine, what = 0 <= value <= 1, "from 0 to 1"
        else:
            fine, what = 0 < value < math.inf, "above 0 and finite"
        if not fine:
            return f"--{name.replace('_', '-')} {value}: must be {what}"
    return None
