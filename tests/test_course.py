"""Every command the course names (exercises/README.md, PLAN.md, QUESTIONS.md) still parses: its
program exists and takes its flags, so a renamed flag or module fails here, not in a classroom.
Each command's own argument parser reads its flags and the run stops there (no training)."""
import argparse
import glob
import importlib
import os
import re
import shlex

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COURSE = [os.path.join(ROOT, "exercises", name) for name in ("README.md", "PLAN.md", "QUESTIONS.md")]


def course_commands():
    """Every `python ...` the course files name, in inline code (which may wrap a line) or in a
    fenced block, with what stands before `python` (an environment variable) left off."""
    found = set()
    for path in COURSE:
        text = open(path, encoding="utf-8").read()
        blocks = re.findall(r"```\w*\n(.*?)```", text, re.S)
        spans = re.findall(r"`([^`]+)`", re.sub(r"```\w*\n.*?```", "", text, flags=re.S))
        lines = [line.split("#")[0] for block in blocks for line in block.splitlines()] + spans
        for line in lines:
            command = " ".join(line.split())
            if re.match(r"^(\w+=\S+ )?python ", command):
                found.add(command[command.index("python "):])
    return sorted(found)


class Parsed(Exception):
    """Raised by the parser once the flags are read: the command stops before any work."""


def module_of(words):
    """(module name, argv) of `python FILE.py ...` or `python -m MODULE ...`."""
    if words[1] == "-m":
        return words[2], words[3:]
    return words[1].removesuffix(".py").replace("/", "."), words[2:]


def test_the_course_names_commands():
    commands = course_commands()
    assert len(commands) >= 15 and "python -m exercises" in commands
    assert any(c.startswith("python text2grad.py --task summarize --min-new-tokens 0") for c in commands)


@pytest.mark.parametrize("command", course_commands())
def test_a_course_command_parses(command, monkeypatch):
    words = shlex.split(command)
    name, argv = module_of(words)
    if name == "pytest":  # the paths it names exist, and a -k picks some test there
        paths = [w for w in argv if not w.startswith("-") and os.path.exists(os.path.join(ROOT, w))]
        assert paths, command
        if "-k" in argv:
            key = argv[argv.index("-k") + 1]
            files = [f for p in paths for f in ([os.path.join(ROOT, p)] if p.endswith(".py") else
                                                glob.glob(os.path.join(ROOT, p, "test_*.py")))]
            assert any(key in open(f).read() or key in os.path.basename(f) for f in files), command
        return
    if name == "exercises":  # python -m exercises takes text2grad.py's flags
        name = "text2grad"
    main = importlib.import_module(name).main
    if not argv and "argv" not in main.__code__.co_varnames:
        return  # a command with no flags (exercises.silent_bug)
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(parser, args=None, namespace=None):
        parse(parser, args, namespace)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    with pytest.raises(Parsed):
        main(argv)


def test_a_renamed_flag_fails_here(capsys):
    # what the test above relies on: a flag a program does not take stops it at its parser, and a
    # flag's prefix is not taken for it (flags.parser: allow_abbrev=False)
    for argv in (["--min-new-token", "0"], ["--updatez", "3"]):
        with pytest.raises(SystemExit) as stop:
            importlib.import_module("text2grad").main(argv + ["--help-never-reached"])
        assert stop.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
