"""exercises/: the stubs mirror the project's functions, the seam puts functions in place of the
project's, and the untouched stubs fail every check in one line."""
import inspect
import os
import re
import subprocess
import sys
import types

import pytest

import align
import grpo
import guards
import loss
import ppo
import text2grad
from exercises import seam, student
from exercises.__main__ import main as first_look

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXERCISE_OF = {name: e for e, names in seam.EXERCISES.items() for name in names}


def test_every_stub_has_its_projects_signature_and_names_its_exercise():
    assert set(EXERCISE_OF) == set(seam.HOMES)
    for name, home in seam.HOMES.items():
        assert inspect.signature(getattr(student, name)) == inspect.signature(getattr(home, name))
        arguments = [None] * len(inspect.signature(getattr(home, name)).parameters)
        with pytest.raises(NotImplementedError, match=f"^{EXERCISE_OF[name]}: write {name} "):
            getattr(student, name)(*arguments)
    assert seam.written(student) == {}


def test_install_puts_functions_in_place_and_puts_the_projects_back():
    def mine(offsets, spans, text):
        return [0.5] * len(offsets)
    before = seam.install({"span_rewards": mine})
    try:
        delta, _ = align.align("a cat", [(0, 1), (1, 5)], {"good_spans": ["cat"], "poor_spans": []})
        assert delta == [0.5, 0.5]  # align() called the installed function
    finally:
        seam.install(before)
    assert align.span_rewards is before["span_rewards"] and seam.reference() == {
        name: getattr(module, name) for module in (align, guards, ppo, loss, grpo)
        for name in seam.HOMES if seam.HOMES[name] is module}
    with pytest.raises(ValueError, match="no exercise writes masked_whiten"):
        seam.install({"masked_whiten": mine})
    half_done = types.SimpleNamespace(span_rewards=mine, find_span=student.find_span)
    assert seam.written(half_done) == {"span_rewards": mine}  # a stub is not installed


TINY = ["--task", "facts", "--device", "cpu", "--train", "64", "--annotated", "32", "--demonstrations", "512",
        "--validation", "8", "--test", "8", "--n-layer", "1", "--n-embd",
        "32", "--pretrain-steps", "2", "--sft-steps", "4", "--reward-steps", "2", "--updates", "2",
        "--ppo-batch-size", "8", "--minibatch-size", "4", "--block-size", "384", "--figure", ""]
# (an SFT policy of 4 steps can ramble to the length limit: 384 positions hold its facts answers)


@pytest.mark.slow
def test_the_first_look_through_the_seam_equals_the_plain_run(monkeypatch, capsys):
    """python -m exercises with the project's own functions in exercises/student.py (wrapped,
    counted): every function is called through the seam, and every number is the plain run's."""
    for module, name in ((m, n) for n, m in seam.HOMES.items()):
        monkeypatch.setattr(module, name, getattr(module, name))  # put back after the test
    plain = text2grad.main(TINY)
    calls = {name: 0 for name in seam.HOMES}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper
    for name, function in seam.reference().items():
        monkeypatch.setattr(student, name, counted(name, function))
    through = first_look(TINY)
    assert through == plain
    # facts pays praise per phrase (bound_praise); GRPO is not run here (exercises/test_e7_grpo.py)
    assert {name for name, n in calls.items() if n == 0} == {"group_advantages"}
    assert "exercises: yours:" in capsys.readouterr().out


def test_the_untouched_stubs_fail_every_check_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "EXERCISES"}
    result = subprocess.run([sys.executable, "-m", "pytest", "exercises", "-p",
                             "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    out = result.stdout
    assert result.returncode == 1, out[-2000:]
    assert "exercises: checking exercises/student.py" in out
    failed = int(re.search(r"(\d+) failed", out).group(1))
    assert " passed" not in out.splitlines()[-1] and failed >= 30
    # each failure's report: one line naming the check and the exercise whose stub it reached
    bodies = re.findall(r"^_+ (test\w+) _+\n(.*?)(?=\n_+ test\w+ _+\n|\n=+ )", out, re.S | re.M)
    assert len(bodies) == failed
    for check, body in bodies:  # (a progress bar's captured output may follow)
        report = body.split("\n-----")[0].strip()
        assert re.fullmatch(rf"{check}: E\d: write \w+ in exercises/student\.py \(handout, E\d\)",
                            report), body
