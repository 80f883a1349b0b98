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
expressions depending on whether x (or y) is greater than, less than, at least or at most a
constant. The parameters are x and y or one of five other pairs of letters, renamed in prompt and
code alike, so that every template has over a hundred distinct prompts.

Flaws in the demonstrations (FLAW_RATES), as imperfect human demonstrators make them. Three are
systematic annotator biases tied to the wording of the problem, so that an SFT policy learns them
under greedy decoding; the others are rare slips at random places, which greedy decoding mostly
washes out:
- strict_as_inclusive: "greater than K" written `>= K` ("less than K" as `<= K`).
- bound_off_by_one: "at least K" written `>= K+1` ("at most K" as `<= K-1`), the bound read as exclusive.
- else_branch_copied: the absolute difference's else branch written `x - y` like the first branch.
- flipped_comparison, off_by_one_constant, swapped_plus_minus, swapped_operands: random slips.
A flaw is drawn only where the problem offers its context; facts["flaw_contexts"] lists those.
With the rates below the demonstrations pass about 68% of hidden tests (RESULTS.md: the SFT policy's
score, which keeps the biases and loses most of the slips).

The critic runs the hidden tests. If some fail, it walks the response's parse tree alongside the
reference's, finds the smallest subexpressions that differ (a comparison, or the operation around a
wrong constant or operand), keeps those that break the reference when put into it alone, and
quotes them as poor spans; matching branches and conditions are quoted as good. A quote that occurs
twice in the response is widened leftward until unique (a repeated `x - y` becomes `else x - y`),
since spans are found by leftmost string match. Prose: what the spec asks for, as code, with
[brackets] around its tokens where the response's differ (the reasoning before the verdict, every
token of it a comparison: "Wanted: `x + y if x [>] 4 else x * y`."), then the first failing test, why each blamed part is wrong, and what
is right, in at most four sentences. Limits: it judges against one reference,
so a correct but differently shaped part of a failing response can be blamed with the real error,
and when the shapes differ at the top (or in more than two places) the whole return expression is
blamed.
"""
import difflib
import functools
import random
import re
import zlib

from data import Example, minilang
from data.minilang import MiniLangError

NAME = "code"
PRIMARY = "pass_rate"

# Chance that a demonstration carries each flaw kind, given the context in the comment. Systematic
# biases first: they are drawn before the random slips, which may then land on top of them.
FLAW_RATES = {
    "strict_as_inclusive": 0.8,   # threshold "greater/less than K": `>` written `>=`, `<` written `<=`
    "bound_off_by_one": 0.75,     # threshold "at least/at most K": the constant written K+1 / K-1
    "else_branch_copied": 0.7,    # absolute difference: else branch `y - x` written `x - y`
    "flipped_comparison": 0.06,   # any comparison: direction reversed, `>` <-> `<`
    "off_by_one_constant": 0.06,  # a constant outside comparisons and the branch above: one more or less
    "swapped_plus_minus": 0.06,   # any binary + or -: replaced by the other
    "swapped_operands": 0.06,     # a subtraction of two names, not in an absolute difference: `y - x`
}
# Relative frequency of each template. The threshold share sets how much the systematic biases cost.
TEMPLATE_WEIGHTS = {"threshold": 18, "arith_const": 3, "formula": 2.5, "larger_smaller": 2, "absdiff": 2,
                    "remainder": 1.5}
N_TESTS = 8
BOUNDARY_TESTS = 4   # threshold tests with the compared argument exactly at the bound
LOW, HIGH = -9, 9    # range of test arguments
# Parameter names. Problems are written with x and y and renamed to one of these pairs, so that each
# template has hundreds of distinct prompts and make_splits' held-out prompts leave it in training.
PARAMETERS = (("x", "y"), ("m", "n"), ("p", "q"), ("u", "v"), ("j", "k"), ("s", "t"))

RELATIONS = (("greater than", ">", "strict"), ("less than", "<", "strict"),
             ("at least", ">=", "inclusive"), ("at most", "<=", "inclusive"))
BRANCHES = (("x plus y", "x + y"), ("x minus y", "x - y"), ("y minus x", "y - x"), ("x times y", "x * y"),
            ("x", "x"), ("y", "y"), ("0", "0"), ("x plus {c}", "x + {c}"), ("y times {c}", "y * {c}"))
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
    return (f"{a} minus {b} when {a} is greater than {b}, otherwise {b} minus {a}",
            f"{a} - {b} if {a} > {b} else {b} - {a}", _two_operands(rng, a, b), "absdiff")


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
    def around(i, distance=1):  # the tokens `distance` places before and after token i
        return {texts[j] for j in (i - distance, i + distance) if 0 <= j < len(texts)}
    places = {
        "strict_as_inclusive": [comparison] if context == "strict_threshold" else [],
        "bound_off_by_one": [bound] if context == "inclusive_threshold" else [],
        "else_branch_copied": [copied] if context == "absdiff" else [],
        "flipped_comparison": [comparison] if comparison is not None else [],
        "off_by_one_constant": [i for i, token in enumerate(tokens) if token.kind == "int"
                                and not around(i) & set(minilang.COMPARISONS)
                                and (copied is None or abs(i - copied) != 1)],
        "swapped_plus_minus": plus_minus,
        "swapped_operands": [i for i in plus_minus if texts[i] == "-" and context != "absdiff"
                             and around(i) <= {texts[3], texts[5]}  # the two parameters' names
                             and not around(i, 2) & {"*", "//", "%"}],
    }
    offered = [kind for kind in FLAW_RATES if places[kind]]
    flaws = []
    for kind in offered:
        if (rng.random() >= FLAW_RATES[kind]) if kinds is None else kind not in kinds:
            continue
        flaws.append(kind)
        i = rng.choice(places[kind])
        if kind == "strict_as_inclusive":
            texts[i] += "="
        elif kind == "bound_off_by_one":
            texts[i] = str(int(texts[i]) + (1 if texts[i - 1] == ">=" else -1))
        elif kind in ("else_branch_copied", "swapped_operands"):
            texts[i - 1], texts[i + 1] = texts[i + 1], texts[i - 1]
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
        spec, expression, pairs, context = TEMPLATES[template](rng)
        reference = f"def f(x, y): return {expression}"
        tests = [[list(args), _value(expression, args)] for args in pairs]
        demonstration, flaws, offered = _demonstrate(reference, context, rng)
        parameters = dict(zip("xy", rng.choice(PARAMETERS)))
        def rename(text): return NAME_PATTERN.sub(lambda match: parameters[match.group()], text)
        examples.append(Example(prompt=rename(f"Write f(x, y) that returns {spec}."),
                                reference=rename(reference), demonstration=rename(demonstration), flaws=flaws,
                                facts={"template": template, "tests": tests, "flaw_contexts": offered,
                                       "context": context}))
    return examples


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
    return program, f"{_opening(example, program)} {verdict}"


def metrics(example, response):
    passed, total = minilang.passes(response, example.facts["tests"])
    return {"pass_rate": passed / total, "pass_at_1": float(passed == total)}


# ---------------------------------------------------------------------------------------------------
# The critic

def _quote(source, tokens, node):
    """(start, end) of the node's text, widened leftward a token at a time until it occurs only once
    in source, so that a leftmost string match finds it: a repeated `x - y` becomes `else x - y`."""
    for start in reversed([token.start for token in tokens if token.start <= node.start]):
        text = source[start:node.end]
        if source.find(text, source.find(text) + 1) == -1:
            return start, node.end
    return 0, node.end


def _disjoint(span, spans):
    return all(span[1] <= start or end <= span[0] for start, end in spans)


def _same_node(a, b):
    return a.kind == b.kind and a.value == b.value and len(a.children) == len(b.children)


def _differences(mine, theirs):
    """[(response node, reference node)]: the smallest subexpressions that differ. A wrong constant
    or name is reported with the operation around it (`x + 4`, not `4`), unless it is a whole branch
    of a conditional."""
    if minilang.shape(mine) == minilang.shape(theirs):
        return []
    if not _same_node(mine, theirs) or not mine.children:
        return [(mine, theirs)]
    found = []
    for a, b in zip(mine.children, theirs.children):
        if minilang.shape(a) != minilang.shape(b):
            if mine.kind != "if" and not (a.children and b.children):
                return [(mine, theirs)]
            found += _differences(a, b)
    return found


def _matches(mine, theirs):
    """The largest parts of the response equal to their reference counterpart: subexpressions with
    an operator, or single names and constants that are a branch of the conditional."""
    found = []
    if _same_node(mine, theirs):
        for a, b in zip(mine.children, theirs.children):
            if minilang.shape(a) != minilang.shape(b):
                found += _matches(a, b)
            elif a.children or mine.kind == "if":
                found.append(a)
    return found


def _explain(mine, theirs, response, reference, rng):
    """One sentence on why the response's `mine` is wrong, given the reference's `theirs`."""
    wrong, right = f"`{response[mine.start:mine.end]}`", f"`{reference[theirs.start:theirs.end]}`"
    operands = [minilang.shape(child) for child in mine.children]
    if mine.kind == theirs.kind == "compare" and mine.value != theirs.value:
        if operands == [minilang.shape(child) for child in theirs.children]:
            if mine.value.rstrip("=") == theirs.value.rstrip("="):
                strict = len(theirs.value) == 1
                return rng.choice((f"The comparison {wrong} should be {'strict' if strict else 'inclusive'}, "
                                   f"{right}: the bound itself {'does not count' if strict else 'counts'}.",
                                   f"At the bound {wrong} picks the wrong branch; the spec means {right}."))
            return rng.choice((f"The comparison {wrong} points the wrong way; it should be {right}.",
                               f"{wrong} reverses the condition, which should read {right}."))
    if _same_node(mine, theirs) and mine.kind in ("compare", "binary"):
        pairs = list(zip(mine.children, theirs.children))
        constants = [(a.value, b.value) for a, b in pairs if a.kind == b.kind == "int" and a.value != b.value]
        if constants and all(abs(a - b) == 1 for a, b in constants) and all(
                minilang.shape(a) == minilang.shape(b) for a, b in pairs if not a.kind == b.kind == "int"):
            return rng.choice((f"The constant in {wrong} is off by one; it should be {right}.",
                               f"{wrong} is off by one: the spec asks for {right}."))
        if operands == [minilang.shape(child) for child in reversed(theirs.children)]:
            return rng.choice((f"{wrong} has its operands the wrong way round; it should be {right}.",
                               f"The operands of {wrong} are swapped: the spec asks for {right}."))
    if mine.kind == theirs.kind == "binary" and {mine.value, theirs.value} == {"+", "-"}:
        verb, wanted = ("adds", "subtract") if mine.value == "+" else ("subtracts", "add")
        return rng.choice((f"{wrong} {verb} where the spec asks to {wanted}; it should be {right}.",
                           f"The sign in {wrong} is wrong: the spec means {right}."))
    return rng.choice((f"{wrong} does not compute what the spec asks; it should be {right}.",
                       f"{wrong} is wrong here; the spec describes {right}."))


def _annotation(feedback, good=(), poor=()):
    return {"textual_feedback": " ".join(feedback), "good_spans": list(good), "poor_spans": list(poor)}


def _unparseable(response, error, rng):
    text = response.strip()
    if not text:
        return _annotation(["The response is empty; the task needs a function like `def f(x, y): return ...`."])
    feedback = [rng.choice(("The response is not a valid one-line function",
                            "This does not parse as a function", "The code cannot be run")) + f": {error}.",
                rng.choice(("Every hidden test fails.", "No hidden test can pass."))]
    if len(text) <= 40:
        return _annotation(feedback, poor=[text])
    # About 30 characters from where parsing failed (the tail, if it failed at the end).
    start = error.position or 0
    if not response[start:].strip():
        start = len(response.rstrip()) - 30
    start = len(response) - len(response[start:].lstrip())
    for end in range(start + 30, len(response) + 1):
        piece = response[start:end].rstrip()
        if response.find(piece) == start:
            return _annotation(feedback, poor=[piece])
    return _annotation(feedback, poor=[text])


def critique(example, response):
    """The programmatic annotator: {"textual_feedback": str, "good_spans": [str], "poor_spans": [str]}.
    The feedback opens with what the spec asks for, as code, marked where the response differs
    (_marked; the reasoning before the verdict: a reward model that writes it compares the response
    with the spec token by token, instead of reading "greater than" off the prompt while it
    labels), then the test results and the verdicts."""
    annotation = _judge(example, response)
    return {**annotation, "textual_feedback": f"{_opening(example, response)} {annotation['textual_feedback']}"}


def _opening(example, response):
    """The critique's first sentence: the spec as code, marked where the response differs (its
    wording keyed to the reference)."""
    wanted = _marked(example.reference, response)
    return random.Random(zlib.crc32(example.reference.encode())).choice(
        (f"The spec asks for `{wanted}`.", f"The spec means `{wanted}`.", f"Wanted: `{wanted}`."))


def _marked(reference, response):
    """The reference's return expression with [brackets] around its tokens where the response's
    differ (a token-level diff of the two programs; [] where the response has tokens the reference
    lacks):  reference `x + y if x > 4 else x * y`, response `... if x >= 4 ...` -> `x + y if x [>] 4
    else x * y`. A response that does not parse differs everywhere. A mark says "differs", not
    "wrong": renamed parameters are marked though they pass every test (the verdict after it says so)."""
    theirs = minilang.tokenize(reference)[:-1]
    try:
        minilang.parse(str(response))
        mine = [token.text for token in minilang.tokenize(str(response))[:-1]]
    except MiniLangError:
        mine = []
    first = [token.text for token in theirs].index("return") + 1
    marked, empty = set(), set()
    matcher = difflib.SequenceMatcher(None, mine, [token.text for token in theirs], autojunk=False)
    for op, _, _, j1, j2 in matcher.get_opcodes():
        if op in ("replace", "insert"):
            marked.update(range(j1, j2))
        elif op == "delete":
            empty.add(j1)
    out, end = [], theirs[first].start
    for j in range(first, len(theirs) + 1):
        if j in empty and j not in marked:
            out.append("[] " if j == first else " []")
        if j == len(theirs):
            break
        out.append(reference[end:theirs[j].start])
        text = theirs[j].text
        if j in marked and (j == first or j - 1 not in marked):
            text = "[" + text
        if j in marked and j + 1 not in marked:
            text += "]"
        out.append(text)
        end = theirs[j].end
    return "".join(out).strip()


def _judge(example, response):
    """The critique without its opening statement of the spec (whose wording is keyed to the reference)."""
    # Wording varies with the response but is the same every time for the same response.
    rng = random.Random(zlib.crc32(str(response).encode("utf-8", "surrogatepass")))
    try:
        program = minilang.parse(response)
    except MiniLangError as error:
        return _unparseable(str(response), error, rng)
    tests, reference = example.facts["tests"], minilang.parse(example.reference)
    tokens = minilang.tokenize(response)[:-1]
    body, n = program.body, len(tests)

    def quoted(spans):
        return [response[start:end] for start, end in spans]

    failures = []
    for args, expected in tests:
        try:
            got = minilang.run(program, args)
        except MiniLangError as error:
            got = error
        if got != expected:
            failures.append((f"f({', '.join(map(str, args))})", expected, got))
    if not failures:  # praise the condition and the branches, or the whole expression
        feedback = [rng.choice((f"Passes all {n} hidden tests.", f"All {n} hidden tests pass.",
                                f"Correct: every one of the {n} hidden tests passes."))]
        good = []
        for part in body.children if body.kind == "if" else (body,):
            span = _quote(response, tokens, part)
            if _disjoint(span, good):
                good.append(span)
        if body.kind == "if":
            condition = response[body.children[1].start:body.children[1].end]
            feedback.append(rng.choice((f"The condition `{condition}` gets the boundary case right.",
                                        "Both branches and the condition match the spec.")))
        return _annotation(feedback, good=quoted(good))

    call, expected, got = failures[0]
    failed = len(failures)
    if isinstance(got, MiniLangError):
        feedback = [f"Fails {failed} of {n} hidden tests: {call} stops with an error ({got})."]
    else:
        feedback = [rng.choice((
            f"Fails {failed} of {n} hidden tests: {call} returns {got} but {expected} was expected.",
            f"{failed} of {n} hidden tests {'fails' if failed == 1 else 'fail'}; for example {call} gives "
            f"{got} instead of {expected}.",
            f"Only {n - failed} of {n} hidden tests pass: {call} should be {expected}, not {got}."
            if failed < n else f"No hidden test passes: {call} should be {expected}, not {got}."))]
    if program.params != reference.params:
        feedback.append(f"The function should take ({', '.join(reference.params)}), "
                        f"not ({', '.join(program.params)}).")
        return _annotation(feedback, poor=[response[tokens[0].start:program.header_end]])

    # Blame the differences that break the reference when put into it alone (all, if none does):
    # a harmless one, like `x >= y` in "the larger of x and y", is not a mistake.
    blamed = _differences(body, reference.body)
    blamed = [(mine, theirs) for mine, theirs in blamed
              if minilang.passes(example.reference[:theirs.start] + response[mine.start:mine.end]
                                 + example.reference[theirs.end:], tests)[0] < n] or blamed
    if not blamed or len(blamed) > 2:  # too different to pin down: blame the whole return expression
        blamed = [(body, reference.body)]
    poor = []
    for mine, theirs in blamed:
        span = _quote(response, tokens, mine)
        if _disjoint(span, poor):
            poor.append(span)
            feedback.append(_explain(mine, theirs, response, example.reference, rng))
    good = []
    if len(feedback) < 3:  # room for one sentence of praise, on at most two correct parts
        for part in sorted(_matches(body, reference.body), key=lambda node: node.start - node.end):
            span = _quote(response, tokens, part)
            if len(good) < 2 and _disjoint(span, poor + good):
                good.append(span)
    if good:
        parts, plural = " and ".join(f"`{text}`" for text in quoted(good)), len(good) > 1
        feedback.append(rng.choice((f"{parts} {'are' if plural else 'is'} correct.",
                                    f"{parts} {'match' if plural else 'matches'} the spec.",
                                    f"On the other hand, {parts} {'are' if plural else 'is'} right.")))
    return _annotation(feedback, good=quoted(good), poor=quoted(poor))
