"""Code-generation toy task, standing in for KodCode: a one-line integer function from a short spec.

    prompt:    "Write f(x, y) that returns x plus y when x is greater than 4, otherwise x times y."
    reference: "def f(x, y): return x + y if x > 4 else x * y"

Programs are written in the whitelisted Python subset of data/minilang.py and run by its own
interpreter: model output never reaches Python's exec/eval. Each problem keeps 8 hidden tests
(argument pairs and the reference's results); a threshold problem's include four at the bound and
one each side of it, so that they tell > from >= and the bound from its neighbours.

Metric: pass_rate = the fraction of hidden tests a response passes (PRIMARY); pass_at_1 = 1 if all pass.

Templates (TEMPLATE_WEIGHTS), all with constants 0-9: a constant added, subtracted or multiplied;
a formula in both arguments and a constant (x plus y minus 3, x times 4 plus y, ...); the larger
or smaller of two operands, as a conditional expression; the absolute difference of two operands,
as a conditional; a remainder or a rounded-down division; and, most often, a threshold: one of two
branches (x plus y, 5 minus x, y squared, double x, ...) depending on whether x (or y) is greater
than, less than, at least or at most a constant. The parameters are x and y or one of five other
pairs of letters, renamed in prompt and code alike, so that every template has over a hundred
distinct prompts.

Flaws in the demonstrations (FLAW_RATES), as imperfect human demonstrators make them. Six are
systematic habits tied to the wording of the problem (SYSTEMATIC), so that an SFT policy learns
them under greedy decoding; a threshold problem offers about two of them, each in its own place
(the comparison, and each branch), so that a response carries several independent flaws (1.4 per
demonstration, 1.9 on thresholds) and a sum of verdicts hides which part was wrong. The others are
rare slips at random places, which greedy decoding mostly washes out:
- strict_as_inclusive: "greater than K" written `>= K` ("less than K" as `<= K`).
- bound_off_by_one: "at least K" written `>= K+1` ("at most K" as `<= K-1`), the bound read as exclusive.
- else_branch_copied: the absolute difference's else branch written `x - y` like the first branch.
- reversed_subtraction: "y minus x" written `x - y`, "5 minus x" written `x - 5`: the first name
  first (in a threshold's branch, or the formula "y minus x plus 3").
- squared_as_double and double_as_squared: "x squared" written `x * 2`, "double x" written `x * x`.
- flipped_comparison, off_by_one_constant, swapped_plus_minus, swapped_operands: random slips.
A flaw is drawn only where the problem offers its context; facts["flaw_contexts"] lists those. A
habit is made at every place it is offered, and every problem's hidden tests catch each habit kind
it offers, made alone. Made in both branches, a habit can be invisible to the tests in one of them
(about one demonstration in 2,000); the critic, which blames only what fails a test, then leaves
that place unblamed. With the rates below the demonstrations pass about 48% of hidden tests.

The critic (what critique() returns) is in data/code_critic.py.
"""
import functools
import random
import re

from data import Example, code_critic, minilang

NAME = "code"
PRIMARY = "pass_rate"
WATCHED = ("criticised", "answers the critic blames")  # read beside the curves

# Chance that a demonstration carries each flaw kind, given the context in the comment. Habits first:
# they are drawn before the random slips, which may then land on top of them. The right form of the
# comparison and of a branch is in one demonstration in ten that offers it (as on summarize), so that
# PPO must find it; the absolute difference's else branch is in three.
FLAW_RATES = {
    "strict_as_inclusive": 0.9,   # threshold "greater/less than K": `>` written `>=`, `<` written `<=`
    "bound_off_by_one": 0.9,      # threshold "at least/at most K": the constant written K+1 / K-1
    "else_branch_copied": 0.7,    # absolute difference: else branch `y - x` written `x - y`
    "reversed_subtraction": 0.9,  # "y minus x", "5 minus x" (not an absolute difference): `x - y`, `x - 5`
    "squared_as_double": 0.9,     # "x squared": `x * x` written `x * 2`
    "double_as_squared": 0.9,     # "double x": `2 * x` written `x * x`
    "flipped_comparison": 0.06,   # any comparison: direction reversed, `>` <-> `<`
    "off_by_one_constant": 0.06,  # a constant outside comparisons and the branch above: one more or less
    "swapped_plus_minus": 0.06,   # any binary + or -: replaced by the other
    "swapped_operands": 0.06,     # a subtraction of two names, not in an absolute difference: `y - x`
}
SYSTEMATIC = list(FLAW_RATES)[:6]  # the habits: made at every place the problem offers

# Relative frequency of each template. The threshold share sets how much the systematic biases cost.
TEMPLATE_WEIGHTS = {"threshold": 24, "arith_const": 3, "formula": 2.5, "larger_smaller": 2, "absdiff": 2,
                    "remainder": 1.5}
N_TESTS = 8
BOUNDARY_TESTS = 4   # threshold tests with the compared argument exactly at the bound
LOW, HIGH = -9, 9    # range of random test arguments (a threshold's tests reach one past it, at bound + 1)
# Parameter names. Problems are written with x and y and renamed to one of these pairs, so that each
# template has hundreds of distinct prompts and make_splits' held-out prompts leave it in training.
PARAMETERS = (("x", "y"), ("m", "n"), ("p", "q"), ("u", "v"), ("j", "k"), ("s", "t"))

RELATIONS = (("greater than", ">", "strict"), ("less than", "<", "strict"),
             ("at least", ">=", "inclusive"), ("at most", "<=", "inclusive"))
# A threshold's two branches. Half of them offer a habit (reversed_subtraction, squared_as_double,
# double_as_squared), so that a threshold problem offers two habits on average, each in its own place.
BRANCHES = (("x plus y", "x + y"), ("x minus y", "x - y"), ("x times y", "x * y"), ("x", "x"), ("0", "0"),
            ("x plus {c}", "x + {c}"), ("y times {c}", "y * {c}"),
            ("y minus x", "y - x"), ("{c} minus x", "{c} - x"), ("{c} minus y", "{c} - y"),
            ("x squared", "x * x"), ("y squared", "y * y"), ("double x", "2 * x"), ("double y", "2 * y"))
FORMULAS = (("x plus y plus {c}", "x + y + {c}"), ("x plus y minus {c}", "x + y - {c}"),
            ("x minus y minus {c}", "x - y - {c}"), ("y minus x plus {c}", "y - x + {c}"),
            ("x times y plus {c}", "x * y + {c}"), ("x times y minus {c}", "x * y - {c}"),
            ("x times {c} plus y", "x * {c} + y"), ("x times {c} minus y", "x * {c} - y"))
NAME_PATTERN = re.compile(r"\b[xy]\b")


# ---------------------------------------------------------------------------------------------------
# Problems, written with x and y: (spec, reference expression, test argument pairs, flaw context)

@functools.lru_cache(maxsize=None)
def _function(expression):
    return minilang.parse(f"def f(x, y): return {expression}")


def _value(expression, args):
    return minilang.run(_function(expression), args)


def _random_pair(rng, accept=lambda x, y: True):
    """A random argument pair that `accept` (which some pair in range must satisfy) accepts."""
    while True:
        pair = (rng.randint(LOW, HIGH), rng.randint(LOW, HIGH))
        if accept(*pair):
            return pair


def _tests(rng, required):
    """The required argument pairs, topped up with random ones to N_TESTS, no pair twice."""
    pairs = list(dict.fromkeys(required))
    while len(pairs) < N_TESTS:
        pair = _random_pair(rng)
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def _two_operands(rng, a, b):
    """Tests for a problem that compares operands a and b (each "x", "y" or a constant): a tie,
    a near miss either way, and random pairs with a above and below b."""
    def value(operand, x, y): return x if operand == "x" else y if operand == "y" else int(operand)
    def where(condition): return _random_pair(rng, lambda x, y: condition(value(a, x, y) - value(b, x, y)))
    required = [where(lambda d: d == 0), where(lambda d: d == 1), where(lambda d: d == -1)]
    required += [where(lambda d: d > 0) for _ in range(2)] + [where(lambda d: d < 0) for _ in range(3)]
    return _tests(rng, required)


def _threshold(rng):
    while True:  # until the tests can tell the bound from its neighbours, and > from >=
        words, op, kind = rng.choice(RELATIONS)
        v, bound, c = rng.choice("xy"), rng.randint(0, 9), rng.randint(2, 9)
        (a_words, a), (b_words, b) = [(w.format(c=c), e.format(c=c)) for w, e in rng.sample(BRANCHES, 2)]
        def at(value, other): return (value, other) if v == "x" else (other, value)
        def telling(value):  # the other argument's values for which the two branches differ
            return [o for o in range(LOW, HIGH + 1) if _value(a, at(value, o)) != _value(b, at(value, o))]
        at_bound, below, above = telling(bound), telling(bound - 1), telling(bound + 1)
        if len(at_bound) >= BOUNDARY_TESTS and below and above:
            break
    required = [at(bound, o) for o in rng.sample(at_bound, BOUNDARY_TESTS)]
    required += [at(bound - 1, rng.choice(below)), at(bound + 1, rng.choice(above))]
    for side in (range(LOW, bound - 1), range(bound + 2, HIGH + 1)):  # and one further out on each side
        if side:
            required.append(at(rng.choice(side), rng.randint(LOW, HIGH)))
    return (f"{a_words} when {v} is {words} {bound}, otherwise {b_words}", f"{a} if {v} {op} {bound} else {b}",
            _tests(rng, required), f"{kind}_threshold")


def _arith_const(rng):
    v = rng.choice("xy")
    words, op, smallest = rng.choice((("plus", "+", 1), ("minus", "-", 1), ("times", "*", 2)))
    c = rng.randint(smallest, 9)
    return f"{v} {words} {c}", f"{v} {op} {c}", _tests(rng, []), None


def _formula(rng):
    c = rng.randint(2, 9)
    words, expression = [text.format(c=c) for text in rng.choice(FORMULAS)]
    return words, expression, _tests(rng, []), None


def _larger_smaller(rng):
    words, op = rng.choice((("larger", ">"), ("smaller", "<")))
    a = rng.choice("xy")
    b = str(rng.randint(0, 8)) if rng.random() < 2 / 3 else "y" if a == "x" else "x"  # 8: room for b + 1
    return f"the {words} of {a} and {b}", f"{a} if {a} {op} {b} else {b}", _two_operands(rng, a, b), None


def _absdiff(rng):
    c = str(rng.randint(1, 8))
    a, b = rng.choice((("x", "y"), ("y", "x"), ("x", c), ("y", c), (c, "x"), (c, "y")))
    words, op = rng.choice((("greater than", ">"), ("at least", ">=")))  # the same function: 0 at a tie
    return (f"{a} minus {b} when {a} is {words} {b}, otherwise {b} minus {a}",
            f"{a} - {b} if {a} {op} {b} else {b} - {a}", _two_operands(rng, a, b), "absdiff")


def _remainder(rng):
    v_words, v = rng.choice((("x", "x"), ("y", "y"), ("x plus y", "(x + y)")))
    c = rng.randint(2 if len(v) == 1 else 3, 9)  # (x + y) % 2 == (x - y) % 2 would hide a sign slip
    # The dividend at c and c - 1 tells c from its neighbours; at -1 it shows floor rounding.
    dividends = [_random_pair(rng, lambda x, y: _value(v, (x, y)) == target) for target in (c, c - 1, -1)]
    tests = _tests(rng, dividends)
    if rng.random() < 0.5:
        return f"the remainder of {v_words} divided by {c}", f"{v} % {c}", tests, None
    return f"{v_words} divided by {c}, rounded down", f"{v} // {c}", tests, None


TEMPLATES = {"threshold": _threshold, "arith_const": _arith_const, "formula": _formula,
             "larger_smaller": _larger_smaller, "absdiff": _absdiff, "remainder": _remainder}


# ---------------------------------------------------------------------------------------------------
# Demonstrations: the reference with flaws edited into its tokens

def _demonstrate(reference, context, rng, kinds=None):
    """(demonstration, flaws injected, flaw kinds this problem offers a place for). Each offered flaw
    kind is drawn at its FLAW_RATES rate; or, given kinds, exactly those of them that are offered."""
    tokens = minilang.tokenize(reference)[:-1]
    texts = [token.text for token in tokens]
    comparison = next((i for i, text in enumerate(texts) if text in minilang.COMPARISONS), None)
    bound = comparison + 1 if context in ("strict_threshold", "inclusive_threshold") else None
    copied = len(texts) - 2 if context == "absdiff" else None  # the else branch's minus sign
    plus_minus = [i for i, text in enumerate(texts) if text in ("+", "-")]
    x, y = texts[3], texts[5]  # the parameters' names
    def reversed_operands(left, right):  # `y - x`, `5 - x`, `5 - y`: not the first name first
        return (left, right) == (y, x) or (left.isdigit() and right in (x, y))
    def around(i, distance=1):  # the tokens `distance` places before and after token i
        return {texts[j] for j in (i - distance, i + distance) if 0 <= j < len(texts)}
    places = {
        "strict_as_inclusive": [comparison] if context == "strict_threshold" else [],
        "bound_off_by_one": [bound] if context == "inclusive_threshold" else [],
        "else_branch_copied": [copied] if context == "absdiff" else [],
        "reversed_subtraction": [i for i in plus_minus if texts[i] == "-" and context != "absdiff"
                                 and reversed_operands(texts[i - 1], texts[i + 1])
                                 and not around(i, 2) & {"*", "//", "%"}],
        "squared_as_double": [i + 1 for i in range(1, len(texts) - 1)
                              if texts[i] == "*" and texts[i - 1] == texts[i + 1] in (x, y)],
        "double_as_squared": [i - 1 for i in range(1, len(texts) - 1) if texts[i - 1:i + 2] in (["2", "*", x], ["2", "*", y])],
        "flipped_comparison": [comparison] if comparison is not None else [],
        "off_by_one_constant": [i for i, token in enumerate(tokens) if token.kind == "int"
                                and not around(i) & set(minilang.COMPARISONS)
                                and (copied is None or abs(i - copied) != 1)],
        "swapped_plus_minus": plus_minus,
        "swapped_operands": [i for i in plus_minus if texts[i] == "-" and context != "absdiff"
                             and around(i) <= {texts[3], texts[5]}  # the two parameters' names
                             and not around(i, 2) & {"*", "//", "%"}],
    }
    near_habit = {j for kind in SYSTEMATIC[3:] for i in places[kind] for j in (i - 1, i, i + 1)}
    for slip in ("off_by_one_constant", "swapped_operands"):  # a slip does not undo a habit
        places[slip] = [i for i in places[slip] if i not in near_habit]
    offered = [kind for kind in FLAW_RATES if places[kind]]
    flaws = []
    for kind in offered:
        if (rng.random() >= FLAW_RATES[kind]) if kinds is None else kind not in kinds:
            continue
        flaws.append(kind)
        for i in places[kind] if kind in SYSTEMATIC else [rng.choice(places[kind])]:
            if kind == "strict_as_inclusive":
                texts[i] += "="
            elif kind == "bound_off_by_one":
                texts[i] = str(int(texts[i]) + (1 if texts[i - 1] == ">=" else -1))
            elif kind in ("else_branch_copied", "reversed_subtraction", "swapped_operands"):
                texts[i - 1], texts[i + 1] = texts[i + 1], texts[i - 1]
            elif kind == "squared_as_double":
                texts[i] = "2"
            elif kind == "double_as_squared":
                texts[i] = texts[i + 2]
            elif kind == "flipped_comparison":
                texts[i] = texts[i].translate(str.maketrans("<>", "><"))
            elif kind == "off_by_one_constant":
                constant = int(texts[i])
                texts[i] = str(constant + 1 if constant == 0 or rng.random() < 0.5 else constant - 1)
            else:
                texts[i] = "-" if texts[i] == "+" else "+"
    pieces = [reference[:tokens[0].start]]
    for i, token in enumerate(tokens):
        following = tokens[i + 1].start if i + 1 < len(tokens) else len(reference)
        pieces += [texts[i], reference[token.end:following]]
    return "".join(pieces), flaws, offered


def make_examples(n, seed):
    rng = random.Random(seed)
    names = list(TEMPLATE_WEIGHTS)
    examples = []
    for _ in range(n):
        template = rng.choices(names, [TEMPLATE_WEIGHTS[name] for name in names])[0]
        while True:  # until the hidden tests catch each habit the problem offers, made alone
            spec, expression, pairs, context = TEMPLATES[template](rng)
            reference = f"def f(x, y): return {expression}"
            tests = [[list(args), _value(expression, args)] for args in pairs]
            habits = [k for k in _demonstrate(reference, context, rng, kinds=[])[2] if k in SYSTEMATIC]
            if all(minilang.passes(_demonstrate(reference, context, rng, kinds=[k])[0], tests)[0] < N_TESTS
                   for k in habits):
                break
        demonstration, flaws, offered = _demonstrate(reference, context, rng)
        parameters = dict(zip("xy", rng.choice(PARAMETERS)))
        def rename(text): return NAME_PATTERN.sub(lambda match: parameters[match.group()], text)
        examples.append(Example(prompt=rename(f"Write f(x, y) that returns {spec}."),
                                reference=rename(reference), demonstration=rename(demonstration), flaws=flaws,
                                facts={"template": template, "tests": tests, "flaw_contexts": offered,
                                       "context": context}))
    return examples


def held_out_key(example):
    """The reference program with its parameters named x and y again: a held-out problem is new only
    if no training problem has its program under other names (data.make_splits)."""
    a, b = example.reference[len("def f("):].split(")")[0].split(", ")
    return re.sub(r"\b\w\b", lambda m: {a: "x", b: "y"}.get(m.group(), m.group()), example.reference)


def follow_up(example, rng):
    """One more turn (text, answer) of a pretraining document (data.document): another program for
    the same spec, the reference itself half the time and otherwise the reference with one of the
    flaw kinds the problem offers, then what a check of it says: the spec as code marked where the
    program differs (the critique's opening), and how many hidden tests fail (run by the task's
    own interpreter). A document then supervises several comparisons of a program with the spec,
    token by token (as many turns as fit in the block: about six of code's), where a reward
    model's training record has one."""
    program, offered = example.reference, example.facts["flaw_contexts"]
    if offered and rng.random() < 0.5:
        program = _demonstrate(example.reference, example.facts["context"], rng, kinds=[rng.choice(offered)])[0]
    passed, n = minilang.passes(program, example.facts["tests"])
    verdict = f"Passes all {n} hidden tests." if passed == n else f"Fails {n - passed} of {n} hidden tests."
    return program, f"{code_critic.opening(example, program)} {verdict}"


def metrics(example, response):
    passed, total = minilang.passes(response, example.facts["tests"])
    return {"pass_rate": passed / total, "pass_at_1": float(passed == total)}


critique = code_critic.critique  # the task's critic (the task interface), in data/code_critic.py
