"""How the exercises' checks choose whose functions they call.

    python -m pytest exercises                        # yours (exercises/student.py)
    EXERCISES=reference python -m pytest exercises    # the project's own: every check passes
    python -m pytest                                  # the project's suite: the project's own

Every check is one of the project's tests, imported by name from tests/ (on the path below, as
pytest puts it there for the project's own suite: one module either way): the checks a student's
function must pass are the ones the project's function passes. Before each check the seam puts
the chosen functions in place (exercises/seam.py), and puts the project's back after it.
"""
import os
import sys

import pytest

from exercises import seam, student

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

MODES = ("student", "reference")


def pytest_configure(config):
    mode = os.environ.get("EXERCISES")
    if mode is None:  # yours when only exercises/ was asked for, the project's in its own suite
        here = os.path.dirname(os.path.abspath(__file__))
        paths = [os.path.abspath(arg.split("::")[0]) for arg in config.args] or [os.getcwd()]
        mode = "student" if all(p == here or p.startswith(here + os.sep) for p in paths) \
            else "reference"
    if mode not in MODES:
        raise pytest.UsageError(f"EXERCISES={mode}: use student or reference")
    config.exercises_mode = mode


def pytest_report_header(config):
    if config.exercises_mode == "student":
        return "exercises: checking exercises/student.py (EXERCISES=reference: the project's own)"
    return "exercises: checking the project's own functions (the reference)"


@pytest.fixture(autouse=True)
def functions(request):
    """The functions under check, installed in the project's modules for the check's length."""
    if request.config.exercises_mode == "reference":
        yield seam.reference()
        return
    mine = {name: getattr(student, name) for name in seam.HOMES}
    before = seam.install(mine)
    yield mine
    seam.install(before)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A stub's check fails in one line, its hint; a wrong answer keeps its traceback, then the
    exercise's hint (each test file's HINT)."""
    report = (yield).get_result()
    if not report.failed or call.excinfo is None:
        return
    if call.excinfo.errisinstance(NotImplementedError):
        report.longrepr = f"{item.name}: {call.excinfo.value}"
    elif getattr(item.module, "HINT", None):
        report.longrepr = f"{report.longrepr}\n\nhint: {item.module.HINT}"
