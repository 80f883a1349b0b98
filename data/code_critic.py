"""The code task's critic (data/codegen.py's critique), the programmatic annotator that plays
the paper's GPT-4o on code.

The critic runs the hidden tests. If some fail, it walks the response's parse tree alongside the
reference's, finds the smallest subexpressions that differ (a comparison, or the operation around a
wrong constant or operand), keeps those that break the reference when put into it alone, and
quotes them as poor spans; matching branches and conditions are quoted as good. A quote that occurs
twice in the response is widened leftward until unique (a repeated `x - y` becomes `else x - y`),
since spans are found by leftmost string match. Prose: what the spec asks for, as code, with
[brackets] around its tokens where the response's differ (the reasoning before the verdict, every
token of it a comparison: "Wanted: `x + y if x [>] 4 else x * y`."), then the first failing test,
why each blamed part is wrong, and what is right, in at most five sentences. Limits: it judges
against one reference, so a correct but differently shaped part of a failing response can be
blamed with the real error, and when the shapes differ at the top (or in more than three places) the
whole return expression is blamed.
"""
import difflib
import random
import zlib

from data import minilang
from data.minilang import MiniLangError


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
    if mine.kind == theirs.kind == "binary" and mine.value == theirs.value == "*":
        def factors(node): return [(child.kind, child.value) for child in node.children]
        for name in {child.value for child in theirs.children if child.kind == "name"}:
            square, double = [("name", name)] * 2, [("int", 2), ("name", name)]
            if factors(theirs) == square and factors(mine) in (double, double[::-1]):
                return rng.choice((f"{wrong} doubles {name}, but the spec asks for {name} squared, {right}.",
                                   f"The square of {name} is {right}, not {wrong}."))
            if factors(theirs) == double and factors(mine) == square:
                return rng.choice((f"{wrong} squares {name}, but the spec asks to double it, {right}.",
                                   f"Double {name} is {right}, not {wrong}."))
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
    return {**annotation, "textual_feedback": f"{opening(example, response)} {annotation['textual_feedback']}"}


def opening(example, response):
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
    if not blamed or len(blamed) > 3:  # too different to pin down: blame the whole return expression
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
