"""The code task: MiniLang against Python itself, its limits, the generator, and the critic.

Python's exec is used here only on programs written in this file or made by its templates, never on
model output: it is the independent reference the interpreter must agree with.
"""
import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys

import pytest

from data import Example, codegen, document, minilang
from data.minilang import MiniLangError, parse, passes, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAND_WRITTEN = [
    ("def f(x, y): return x - y if x > y else y - x", [(5, 3), (3, 5), (4, 4), (-2, -7)]),
    ("def f(x, y): return x // y", [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3)]),
    ("def f(x, y): return x % y", [(7, 3), (-7, 3), (7, -3), (-7, -3), (-9, 9)]),
    ("def f(x, y): return -x // 2 + y * -3 % 4", [(5, 1), (-5, 2), (0, -7)]),
    ("def f(x, y): return 2 * (x + y) - -x", [(1, 2), (-4, 9)]),
    ("def f(x, y): return x if x < 0 else y if y < 0 else 0", [(-1, 5), (1, -5), (1, 5)]),
    ("def f(x, y): return (x if x >= y else y) * 2 - 1", [(3, 3), (2, 9), (9, 2)]),
    ("def f(x, y): return max(x, y, 3) - min(x, -y) + abs(x - y)", [(1, 2), (-5, 4), (8, 8)]),
    ("def f(x, y): return 1 if x == y else 2 if x != 0 else 3", [(2, 2), (0, 1), (4, 1)]),
    ("def f(x, y): return x * y + 5 if x + 1 <= y * 2 else x - 7 // (y - 100)", [(1, 3), (9, 1), (-3, -3)]),
    ("def g(a): return --a - - - a", [(4,), (-6,)]),
]


def python_function(source):
    """The function a trusted, hand-written or template-made program defines, run by Python."""
    namespace = {}
    exec(source, namespace)  # trusted text only; see the module docstring
    return next(v for k, v in namespace.items() if k != "__builtins__")


# ---------------------------------------------------------------------------------------------------
# MiniLang

@pytest.mark.parametrize("source,argument_tuples", HAND_WRITTEN)
def test_minilang_agrees_with_python(source, argument_tuples):
    program, function = parse(source), python_function(source)
    for args in argument_tuples:
        assert run(program, list(args)) == function(*args)


def test_floor_division_and_modulo_of_negatives():
    divide, remainder = parse("def f(a, b): return a // b"), parse("def f(a, b): return a % b")
    assert [run(divide, args) for args in ([-7, 2], [7, -2], [-7, -2], [-1, 9])] == [-4, -4, 3, -1]
    assert [run(remainder, args) for args in ([-7, 2], [7, -2], [-7, -2], [-1, 9])] == [1, -1, -1, 8]


def random_expression(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(["x", "y", str(rng.randint(0, 9))])
    a, b = random_expression(rng, depth - 1), random_expression(rng, depth - 1)
    form = rng.randrange(6)
    if form == 0:
        op, c = rng.choice(list(minilang.COMPARISONS)), random_expression(rng, depth - 1)
        return f"({a} if {b} {op} {c} else {a})"
    if form == 1:
        return f"-{a}" if rng.random() < 0.5 else f"{rng.choice(['min', 'max'])}({a}, {b})"
    if form == 2:
        return f"abs({a})"
    return f"({a} {rng.choice(list(minilang.ARITHMETIC))} {b})"


def test_minilang_agrees_with_python_on_random_programs():
    rng = random.Random(0)
    checked = 0
    for _ in range(300):
        source = f"def f(x, y): return {random_expression(rng, 3)}"
        program, function = parse(source), python_function(source)
        for args in ([rng.randint(-9, 9), rng.randint(-9, 9)] for _ in range(4)):
            try:
                expected = function(*args)
            except ZeroDivisionError:
                with pytest.raises(MiniLangError, match="by zero"):
                    run(program, args)
                continue
            assert run(program, args) == expected, (source, args)
            checked += 1
    assert checked > 900


@pytest.mark.parametrize("source,args,message", [
    ("def f(x): return 7 // x", [0], "division by zero"),
    ("def f(x): return 7 % x", [0], "modulo by zero"),
    ("def f(x): return x + z", [1], "unknown name"),
    ("def f(x): return x", [1, 2], "takes 1 arguments"),
    ("def f(x): return x", [True], "not an integer"),
    ("def f(x): return x * x * x * x", [1000], "beyond the limit"),
    ("def f(x): return x", [10 ** 10], "beyond the limit"),
])
def test_runtime_errors(source, args, message):
    with pytest.raises(MiniLangError, match=message):
        run(parse(source), args)


@pytest.mark.parametrize("source", [
    "", "def", "def f(x): return", "def f(x) return x", "def f(x): return x x",
    "def f(x): return x if x else 1", "def f(x): return x < 1", "def f(x): return min(x)",
    "def f(x): return abs(x, x)", "def f(x, x): return x",
    "def f(if): return 1", "def f(max): return 1", "def f(x): return 05", "def f(x): return x; import os",
    "def f(x): return __import__('os')", "def f(x): return 1.5", "def f(x): return x ** 2",
    "def f(x): return 99999999999", "def f(x): return " + "(" * 45 + "x" + ")" * 45,
    "def f(x): return " + "-" * 60 + "x", "def f(x): return x" + " + x" * 100, "def f(x): return x²",
])
def test_parse_errors(source):
    with pytest.raises(MiniLangError):
        parse(source)


def test_passes_never_raises():
    tests = [[[1, 2], 3], [[0, 0], 0]]
    rng = random.Random(1)
    alphabet = list("xy(),:+-*/%<>=! 0123456789") + ["def ", "return ", " if ", " else ", "min", "é", "\ud800"]
    garbage = ["", "   ", "garbage", "é∑漢字", "\x00", "\ud800", "1" * 5000, "(" * 299,
               "def f(x, y): return " + "(" * 130 + "x" + ")" * 130, "def f(x, y): return x // 0"]
    garbage += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(500)]
    for source in garbage:
        passed, total = passes(source, tests)
        assert total == 2 and 0 <= passed <= 2
    assert passes("def f(x, y): return x + y", tests) == (2, 2)
    assert passes("def f(x, y): return x - y", tests) == (1, 2)
    assert all(passes(source, tests) == (0, 2) for source in garbage[:10])


def test_node_spans_slice_back_to_their_subexpression():
    source = "def f(x, y): return (x + 1) * -y if max(x, 3) >= y % 2 else abs(x - y)"
    program = parse(source)
    texts = [source[node.start:node.end] for node in minilang.walk(program.body)]
    for expected in ("(x + 1) * -y", "(x + 1)", "-y", "max(x, 3) >= y % 2", "max(x, 3)", "y % 2", "abs(x - y)",
                     "x - y", source[source.index("return") + 7:]):
        assert expected in texts
    for node in minilang.walk(program.body):  # each span parses alone to the same tree
        if node.kind == "compare":  # not an expression by itself: parse it as a condition
            alone = parse(f"def f(x, y): return 1 if {source[node.start:node.end]} else 0").body.children[1]
        else:
            alone = parse(f"def f(x, y): return {source[node.start:node.end]}").body
        assert minilang.shape(alone) == minilang.shape(node)


# ---------------------------------------------------------------------------------------------------
# Problems and demonstrations

def test_make_examples_deterministic_and_seed_dependent():
    a, b, c = (codegen.make_examples(200, seed) for seed in (5, 5, 6))
    assert a == b and a != c
    script = ("import hashlib, json; from data import codegen; examples = codegen.make_examples(200, 5); "
              "print(hashlib.sha256(json.dumps([e.__dict__ for e in examples]).encode()).hexdigest())")
    digest = hashlib.sha256(json.dumps([e.__dict__ for e in a]).encode()).hexdigest()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, cwd=ROOT)
    assert out.stdout.strip() == digest  # the same in another process: no reliance on salted hash()


EXAMPLES = codegen.make_examples(2000, 7)


def test_references_pass_their_hidden_tests_and_agree_with_python():
    for e in EXAMPLES:
        tests = e.facts["tests"]
        assert len(tests) == codegen.N_TESTS and len({tuple(args) for args, _ in tests}) == codegen.N_TESTS
        assert codegen.metrics(e, e.reference) == {"pass_rate": 1.0, "pass_at_1": 1.0}
        assert len(e.prompt.split()) <= 40 and len(minilang.tokenize(e.reference)) <= 26
    for e in EXAMPLES[:300]:  # template-made references are trusted text
        function = python_function(e.reference)
        assert all(function(*args) == expected for args, expected in e.facts["tests"])
    assert {e.facts["template"] for e in EXAMPLES} == set(codegen.TEMPLATES)


def test_programs_are_varied_enough_to_survive_held_out_splits():
    # make_splits drops a training problem whose program (up to renaming) is held out: 400 held-out
    # problems leave every template at least a third of its training problems (the absolute
    # difference, with the fewest distinct programs, keeps the least)
    held_out = {codegen.held_out_key(e) for e in codegen.make_examples(400, 99)}
    for template in codegen.TEMPLATES:
        programs = [codegen.held_out_key(e) for e in EXAMPLES if e.facts["template"] == template]
        assert sum(p in held_out for p in programs) / len(programs) < 2 / 3, template


def test_hidden_tests_catch_boundary_mistakes():
    for e in EXAMPLES:
        if e.facts["template"] != "threshold":
            continue
        op = next(t.text for t in minilang.tokenize(e.reference) if t.text in minilang.COMPARISONS)
        bound = e.reference.split(f" {op} ")[1].split()[0]
        other = {">": ">=", "<": "<=", ">=": ">", "<=": "<"}[op]
        near_misses = [e.reference.replace(f" {op} ", f" {other} ")]
        near_misses += [e.reference.replace(f" {op} {bound} ", f" {op} {int(bound) + d} ") for d in (-1, 1)]
        for wrong in near_misses:
            assert passes(wrong, e.facts["tests"])[0] < codegen.N_TESTS, wrong


def test_demonstration_flaw_rates_match_documented_rates():
    for kind, rate in codegen.FLAW_RATES.items():
        offered = [e for e in EXAMPLES if kind in e.facts["flaw_contexts"]]
        measured = sum(kind in e.flaws for e in offered) / len(offered)
        assert len(offered) >= 100, kind  # enough for the 4-sigma band below to mean something
        assert measured == pytest.approx(rate, abs=4 * math.sqrt(rate * (1 - rate) / len(offered))), kind
    for e in EXAMPLES:
        assert set(e.flaws) <= set(e.facts["flaw_contexts"])
        assert (e.demonstration == e.reference) == (not e.flaws)
        parse(e.demonstration)
        if e.flaws and set(e.flaws) <= set(codegen.SYSTEMATIC):  # (a random slip on top may undo a habit)
            assert codegen.metrics(e, e.demonstration)["pass_at_1"] == 0.0
    # several independent flaws: on thresholds, most demonstrations carry two habits or more
    threshold = [e for e in EXAMPLES if e.facts["template"] == "threshold"]
    assert sum(len(set(e.flaws) & set(codegen.SYSTEMATIC)) >= 2 for e in threshold) / len(threshold) > 0.5


def test_all_habits_at_once_give_a_wrong_program(monkeypatch):
    monkeypatch.setitem(codegen.__dict__, "FLAW_RATES",
                        {kind: float(kind in codegen.SYSTEMATIC) for kind in codegen.FLAW_RATES})
    for e in codegen.make_examples(300, 8):
        assert e.flaws == [kind for kind in e.facts["flaw_contexts"] if kind in codegen.SYSTEMATIC]
        parse(e.demonstration)
        if e.flaws:
            assert codegen.metrics(e, e.demonstration)["pass_at_1"] == 0.0, e.demonstration


def test_hidden_tests_catch_each_habit_alone():
    # each habit a problem offers, made alone, fails a hidden test: counted with Python's own run
    for e in EXAMPLES[:500]:
        for kind in set(e.facts["flaw_contexts"]) & set(codegen.SYSTEMATIC):
            program = codegen._demonstrate(e.reference, e.facts["context"], random.Random(0), kinds=[kind])[0]
            function = python_function(program)
            assert any(function(*args) != expected for args, expected in e.facts["tests"]), (program, kind)


# ---------------------------------------------------------------------------------------------------
# Metric and critic, on a hand-made problem

THRESHOLD = "def f(x, y): return x + y if x > 4 else x * y"
ARGS = [[4, 1], [4, -3], [4, 7], [3, 2], [5, 2], [-6, 1], [9, -9], [0, 5]]
EXAMPLE = Example("Write f(x, y) that returns x plus y when x is greater than 4, otherwise x times y.",
                  THRESHOLD, THRESHOLD, facts={"tests": [[[x, y], x + y if x > 4 else x * y] for x, y in ARGS]})
SQUARES = Example("Write f(x, y) that returns x squared when y is greater than 3, otherwise 6 minus x.",
                  "def f(x, y): return x * x if y > 3 else 6 - x", "",
                  facts={"tests": [[[x, y], x * x if y > 3 else 6 - x] for x, y in ARGS + [[5, 3]]]})
ABSDIFF = "def f(x, y): return x - y if x > y else y - x"
ABSDIFF_EXAMPLE = Example("(absolute difference)", ABSDIFF, ABSDIFF,
                          facts={"tests": [[[x, y], abs(x - y)] for x, y in ARGS]})


def test_metrics_count_hidden_tests():
    response = "def f(x, y): return x + y if x >= 4 else x * y"
    expected = sum((x + y if x >= 4 else x * y) == (x + y if x > 4 else x * y) for x, y in ARGS) / len(ARGS)
    assert codegen.metrics(EXAMPLE, response) == {"pass_rate": pytest.approx(expected), "pass_at_1": 0.0}
    assert expected == 5 / 8
    assert codegen.metrics(EXAMPLE, "print('hi')") == {"pass_rate": 0.0, "pass_at_1": 0.0}


@pytest.mark.parametrize("example,response,poor", [
    (EXAMPLE, "def f(x, y): return x + y if x >= 4 else x * y", ["x >= 4"]),
    (EXAMPLE, "def f(x, y): return x + y if x > 5 else x * y", ["x > 5"]),
    (EXAMPLE, "def f(x, y): return x - y if x > 4 else x * y", ["x - y"]),
    (EXAMPLE, "def f(x, y): return x + y if x < 4 else x * y", ["x < 4"]),
    (EXAMPLE, "def f(x, y): return x + y if x >= 4 else x - y", ["x >= 4", "x - y"]),
    (EXAMPLE, "def f(x, y): return max(x, y) * 2", ["max(x, y) * 2"]),
    (EXAMPLE, "def f(x, y): return x + y if x > 4 else x // 0", ["x // 0"]),
    (EXAMPLE, "def f(x): return x", ["def f(x):"]),
    (ABSDIFF_EXAMPLE, "def f(x, y): return x - y if x > y else x - y", ["else x - y"]),
    (ABSDIFF_EXAMPLE, "def f(x, y): return x - y if x >= y else x - y", ["else x - y"]),  # >= is harmless here
    (ABSDIFF_EXAMPLE, "def f(x, y): return y - x if x > y else y - x", ["return y - x"]),
    # several flaws, each blamed on its own: the comparison and both branches
    (EXAMPLE, "def f(x, y): return x - y if x >= 4 else x + y", ["x - y", "x >= 4", "x + y"]),
    (SQUARES, "def f(x, y): return x * 2 if y >= 3 else x - 6", ["x * 2", "y >= 3", "x - 6"]),  # three habits
    (SQUARES, "def f(x, y): return x * x if y > 3 else x - 6", ["x - 6"]),
])
def test_critic_quotes_the_wrong_expression(example, response, poor):
    annotation = codegen.critique(example, response)
    assert annotation["poor_spans"] == poor
    assert all(span in response for span in poor) and "hidden tests" in annotation["textual_feedback"]
    for good in annotation["good_spans"]:
        assert good in response and all(good not in span and span not in good for span in poor)
    assert annotation == codegen.critique(example, response)
    # the reasoning before the verdict: the first sentence states the wanted code, from the reference
    # (marked where the response differs: test_the_opening_marks_where_the_response_differs)
    wanted = example.reference.split("return ")[1]
    first = annotation["textual_feedback"].split("`.")[0]
    assert unmarked(first).endswith(f"`{wanted}") and "hidden tests" not in first


def unmarked(text):
    """The critique's opening without its marks: [] with the space beside it, then every bracket."""
    return re.sub(r"\[\] | \[\]|\[|\]", "", text)


@pytest.mark.parametrize("response,marked", [
    (THRESHOLD, "x + y if x > 4 else x * y"),
    ("def f(x, y): return x + y if x >= 4 else x * y", "x + y if x [>] 4 else x * y"),
    ("def f(x, y): return x + y if x >= 4 else x - y", "x + y if x [>] 4 else x [*] y"),
    ("def f(x, y): return x + y if x > 5 else x * y", "x + y if x > [4] else x * y"),
    ("def f(x, y): return x + y", "x + y [if x > 4 else x * y]"),  # the reference's tokens the response lacks
    ("def f(x, y): return x + y if x > 4 else x * y + 1", "x + y if x > 4 else x * y []"),  # tokens it adds
    ("def f(x, y): return y + x if x > 4 else x * y", "[x +] y [] if x > 4 else x * y"),
    ("", "[x + y if x > 4 else x * y]"),
    ("é∑漢字", "[x + y if x > 4 else x * y]"),  # not even tokens: different everywhere
    ("x + y if x > 4 else x * y", "[x + y if x > 4 else x * y]"),  # no function: does not parse
    ("def f(x, y) return x + y if x > 4 else x * y", "[x + y if x > 4 else x * y]"),  # no colon
    ("def f(a, b): return a + b if a > 4 else a * b", "[x] + [y] if [x] > 4 else [x] * [y]"),  # differs, passes
])
def test_the_opening_marks_where_the_response_differs(response, marked):
    # hand-worked token diffs of the response against the reference
    assert codegen.critique(EXAMPLE, response)["textual_feedback"].split("`")[1] == marked


def test_critic_praises_a_correct_response_however_written():
    for response in (THRESHOLD, "def f(x, y): return x*y if 4 >= x else y+x",
                     "def f(x, y): return (x + y) if x > 4 else (x * y)"):
        annotation = codegen.critique(EXAMPLE, response)
        assert annotation["poor_spans"] == [] and annotation["good_spans"]
        assert all(span in response for span in annotation["good_spans"])


@pytest.mark.parametrize("response", [
    "", "   ", "hello world", "def f(x, y): return x +", "é∑漢字 \ud800", "(" * 400,
    "def f(x, y): return x + y # and some trailing commentary here",
    "def f(x, y): return " + "(" * 60 + "x" + ")" * 60,
])
def test_critic_survives_garbage(response):
    annotation = codegen.critique(EXAMPLE, response)
    assert set(annotation) == {"textual_feedback", "good_spans", "poor_spans"}
    assert isinstance(annotation["textual_feedback"], str) and annotation["textual_feedback"]
    assert annotation["good_spans"] == []
    assert all(span and span in response for span in annotation["poor_spans"])
    assert len(annotation["poor_spans"]) == (1 if response.strip() else 0)


def test_critic_blames_every_place_a_habit_was_made():
    # on demonstrations with habits only: every token that differs from the reference's token in its
    # place lies in a blamed span, and every blamed span holds one (read where a habit changed tokens
    # but not their number: all but a bound written -1)
    checked = same_length = 0
    for e in EXAMPLES:
        if not e.flaws or not set(e.flaws) <= set(codegen.SYSTEMATIC):
            continue
        poor = codegen.critique(e, e.demonstration)["poor_spans"]
        blamed = [(e.demonstration.find(p), e.demonstration.find(p) + len(p)) for p in poor]
        theirs, mine = minilang.tokenize(e.reference)[:-1], minilang.tokenize(e.demonstration)[:-1]
        if len(theirs) != len(mine):
            continue
        same_length += 1
        changed = [b for a, b in zip(theirs, mine) if a.text != b.text]
        inside = lambda token, span: span[0] <= token.start and token.end <= span[1]
        if all(any(inside(t, span) for span in blamed) for t in changed):
            checked += 1
        assert all(any(inside(t, span) for t in changed) for span in blamed), (e.demonstration, poor)
    habit_only = sum(bool(e.flaws) and set(e.flaws) <= set(codegen.SYSTEMATIC) for e in EXAMPLES)
    assert same_length > 0.95 * habit_only
    assert checked >= same_length - 2  # a habit made in both branches may be invisible to the tests in one


def test_critic_on_demonstrations_blames_exactly_the_failing_ones():
    for e in EXAMPLES[:600]:
        annotation = codegen.critique(e, e.demonstration)
        spans = annotation["good_spans"] + annotation["poor_spans"]
        assert all(span and span in e.demonstration for span in spans)
        located = sorted((e.demonstration.find(s), e.demonstration.find(s) + len(s)) for s in spans)
        assert all(a[1] <= b[0] for a, b in zip(located, located[1:]))  # disjoint where they are found
        assert bool(annotation["poor_spans"]) == (codegen.metrics(e, e.demonstration)["pass_at_1"] < 1)
        if e.flaws in (["strict_as_inclusive"], ["bound_off_by_one"]):  # blamed: the comparison alone
            assert annotation["poor_spans"] == [e.demonstration.split(" if ")[1].split(" else ")[0]]


def test_pretraining_documents_check_programs_right():
    # data.document on code: the prompt and its reference, then eleven programs for the same spec, each
    # answered with the spec as code (marked where the program differs) and its test count, both
    # checked here against Python's own run of the program and a plain token comparison
    checked = flawed = 0
    for k, e in enumerate(EXAMPLES[:300]):
        turns = document(codegen, e, random.Random(k))
        assert turns[0] == (e.prompt, e.reference) and len(turns) == 12
        wanted = e.reference.split("return ", 1)[1]
        for program, answer in turns[1:]:
            function = python_function(program)  # a template's reference with a template's flaw: trusted text
            failed = sum(function(*args) != expected for args, expected in e.facts["tests"])
            verdict = "Passes all 8 hidden tests." if failed == 0 else f"Fails {failed} of 8 hidden tests."
            opening, said = answer.split("`")[0], answer.split("`")[1]
            assert opening in ("The spec asks for ", "The spec means ", "Wanted: ")
            assert answer.endswith("`. " + verdict)
            assert unmarked(said) == wanted  # the marks taken out: the spec
            same = [t.text for t in minilang.tokenize(program)] == [t.text for t in minilang.tokenize(e.reference)]
            assert ("[" in said) == (not same)  # marked exactly when the program's tokens differ
            flawed += not same
            checked += 1
    assert 0.45 < flawed / checked < 0.55  # the reference half the time, a changed program otherwise


@pytest.mark.parametrize("reference,kind,flawed", [
    ("def f(m, n): return m - n + 3", "swapped_operands", "def f(m, n): return n - m + 3"),
    ("def f(x, y): return x - y + 3", "swapped_operands", "def f(x, y): return y - x + 3"),
    ("def f(p, q): return p * q if q > 5 else p", "flipped_comparison", "def f(p, q): return p * q if q < 5 else p"),
    ("def f(p, q): return p * q if q > 5 else p", "strict_as_inclusive", "def f(p, q): return p * q if q >= 5 else p"),
    ("def f(p, q): return q - p if q > 5 else 7 - q", "reversed_subtraction",
     "def f(p, q): return p - q if q > 5 else q - 7"),  # a habit: made at every place it is offered
    ("def f(m, n): return n - m + 4", "reversed_subtraction", "def f(m, n): return m - n + 4"),
    ("def f(p, q): return q * q if q > 5 else p", "squared_as_double", "def f(p, q): return q * 2 if q > 5 else p"),
    ("def f(p, q): return 2 * q if q > 5 else p", "double_as_squared", "def f(p, q): return q * q if q > 5 else p"),
])
def test_a_chosen_flaw_is_made_whatever_the_parameters_are_called(reference, kind, flawed):
    # follow_up asks _demonstrate for one kind on the renamed reference: it must change the program
    context = "strict_threshold" if " if " in reference else None
    assert codegen._demonstrate(reference, context, random.Random(0), kinds=[kind])[0] == flawed


# the fact each critic's critique opens with: code's wanted expression, qa's passage fact
STATED = {"code": re.compile(r"^(?:The spec asks for |The spec means |Wanted: )`([^`]*)`"),
          "qa": re.compile(r"^(?:The passage says |According to the passage, |In the passage, )([^.]*)\.")}


def test_every_critique_opens_with_the_fact_it_judges_by():
    """code's and qa's critics state first what a verdict needs (the spec as code, marked where the
    response differs; the passage's fact), then judge the response against it."""
    from data import qa
    stated = lambda task, critique: (STATED[task].search(critique) or [None, None])[1]
    truth = {"code": lambda e: e.reference.split("return ", 1)[1], "qa": lambda e: qa._describe(e.facts)[1]}
    for task, module in (("code", codegen), ("qa", qa)):
        for example in module.make_examples(40, seed=1):
            feedback = module.critique(example, example.demonstration)["textual_feedback"]
            said = stated(task, feedback)
            if task == "code":  # the spec, marked where the response differs: the marks taken out
                said = unmarked(said)
            assert said == truth[task](example), feedback
    assert stated("code", "Fails 2 tests. `x + 1` is right.") is None  # not stated first
    assert stated("qa", "The answer says so.") is None
