"""MiniLang: a tiny, safe evaluator for the one-line functions of the code task.

Model output must never reach Python's exec/eval/compile/ast, so generated programs run here instead:
a regex tokenizer, a recursive-descent parser and a tree-walking interpreter for a whitelisted grammar
whose one-line programs are also valid Python with the same result:

    program := "def" NAME "(" NAME ("," NAME)* ")" ":" "return" expr
    expr    := arith ["if" compare "else" expr]           Python's conditional expression
    compare := arith CMP arith                            CMP in < <= > >= == !=
    arith   := term (("+" | "-") term)*
    term    := unary (("*" | "//" | "%") unary)*
    unary   := "-" unary | atom
    atom    := INT | NAME | "(" expr ")" | ("min" | "max" | "abs") "(" expr ("," expr)* ")"

Every node keeps the (start, end) character span it came from, so the critic can quote any
subexpression verbatim; a parenthesised expression's span includes its parentheses. // and % floor
like Python's (-7 // 2 == -4, -7 % 2 == 1).

Limits, each raising MiniLangError: source length, nesting depth (which also bounds Python's own
recursion), integer magnitude, evaluation steps. So do division or modulo by zero, unknown names,
a wrong number of arguments and any parse error.

Left out: chained comparisons (a < b < c), and/or/not, booleans, floats, keywords and builtins as
names, anything but one return statement. Spaces, tabs and newlines may separate any two
tokens (Python would reject a newline outside brackets), and names and digits are ASCII only.
"""
import keyword
import re
from dataclasses import dataclass, replace

MAX_SOURCE = 300     # characters in a program
MAX_DEPTH = 40       # nested expressions and unary minuses
MAX_VALUE = 10 ** 9  # bound on |literal|, |argument| and every intermediate value
MAX_STEPS = 1000     # nodes evaluated in one call

BUILTINS = {"min": min, "max": max, "abs": abs}  # abs takes one argument, min and max two or more
COMPARISONS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
               ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
ARITHMETIC = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
              "//": lambda a, b: a // b, "%": lambda a, b: a % b}

# One token: an integer without leading zeros, a name, or an operator.
TOKEN = re.compile(r"(0|[1-9][0-9]*)|([A-Za-z_][A-Za-z0-9_]*)|(//|<=|>=|==|!=|[-+*%<>(),:])")
SPACE = re.compile(r"[ \t\r\n]*")


class MiniLangError(Exception):
    """Anything a program cannot do. `position` is where in the source it was found, if known."""

    def __init__(self, message, position=None):
        super().__init__(message)
        self.position = position


@dataclass(frozen=True)
class Token:
    kind: str   # "int" | "name" | "op" | "end"
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Node:
    kind: str        # "int" | "name" | "neg" | "binary" | "compare" | "if" | "call"
    value: object    # the integer, the name, the operator or the builtin; None for "if"
    children: tuple  # sub-nodes in source order; for "if": (value_if_true, test, value_if_false)
    start: int       # source[start:end] is this subexpression's text
    end: int


@dataclass(frozen=True)
class Program:
    source: str
    name: str
    params: tuple
    body: Node       # the returned expression
    header_end: int  # source[:header_end] ends with "def f(x, y):"


def shape(node):
    """The node without its spans: equal shapes mean equal expressions, however they are spaced."""
    return node.kind, node.value, tuple(shape(child) for child in node.children)


def walk(node):
    """Every node of the tree, parents before children."""
    yield node
    for child in node.children:
        yield from walk(child)


# ---------------------------------------------------------------------------------------------------
# Tokenizer and parser

def tokenize(source):
    """[Token], ending with an "end" token; whitespace separates tokens and is dropped."""
    tokens, position = [], 0
    while True:
        position = SPACE.match(source, position).end()
        if position == len(source):
            return tokens + [Token("end", "", position, position)]
        match = TOKEN.match(source, position)
        if match is None:
            raise MiniLangError(f"unexpected character {source[position]!r}", position)
        kind = ("int", "name", "op")[match.lastindex - 1]
        tokens.append(Token(kind, match.group(), position, match.end()))
        position = match.end()


class _Parser:
    def __init__(self, source):
        self.tokens = tokenize(source)
        self.i = 0
        self.depth = 0

    def peek(self):
        return self.tokens[self.i]

    def fail(self, wanted):
        token = self.peek()
        found = "the end" if token.kind == "end" else repr(token.text)
        raise MiniLangError(f"expected {wanted} but found {found}", token.start)

    def take(self, text):
        if self.peek().text != text:
            self.fail(repr(text))
        self.i += 1
        return self.tokens[self.i - 1]

    def name(self):
        token = self.peek()
        if token.kind != "name" or keyword.iskeyword(token.text) or token.text in BUILTINS:
            self.fail("a name")
        self.i += 1
        return token

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise MiniLangError(f"nested deeper than {MAX_DEPTH} levels", self.peek().start)

    def program(self, source):
        self.take("def")
        name = self.name().text
        self.take("(")
        params = [self.name().text]
        while self.peek().text == ",":
            self.take(",")
            params.append(self.name().text)
        self.take(")")
        header_end = self.take(":").end
        self.take("return")
        body = self.expr()
        if self.peek().kind != "end":
            self.fail("the end of the program")
        if len(set(params)) != len(params):
            raise MiniLangError("a parameter name is repeated", 0)
        return Program(source, name, tuple(params), body, header_end)

    def expr(self):
        self.enter()
        node = self.arith()
        if self.peek().text == "if":
            self.take("if")
            test = self.compare()
            self.take("else")
            otherwise = self.expr()
            node = Node("if", None, (node, test, otherwise), node.start, otherwise.end)
        self.depth -= 1
        return node

    def compare(self):
        left = self.arith()
        if self.peek().text not in COMPARISONS:
            self.fail("a comparison")
        op = self.take(self.peek().text).text
        right = self.arith()
        return Node("compare", op, (left, right), left.start, right.end)

    def arith(self):
        return self.binary(("+", "-"), self.term)

    def term(self):
        return self.binary(("*", "//", "%"), self.unary)

    def binary(self, ops, operand):
        node = operand()
        while self.peek().kind == "op" and self.peek().text in ops:
            op = self.take(self.peek().text).text
            right = operand()
            node = Node("binary", op, (node, right), node.start, right.end)
        return node

    def unary(self):
        if self.peek().text != "-":
            return self.atom()
        self.enter()
        minus = self.take("-")
        operand = self.unary()
        self.depth -= 1
        return Node("neg", "-", (operand,), minus.start, operand.end)

    def atom(self):
        token = self.peek()
        if token.kind == "int":
            self.i += 1
            return Node("int", _checked(int(token.text), token.start), (), token.start, token.end)
        if token.text == "(":
            self.take("(")
            inner = self.expr()
            close = self.take(")")
            return replace(inner, start=token.start, end=close.end)
        if token.kind == "name" and token.text in BUILTINS:
            self.i += 1
            self.take("(")
            args = [self.expr()]
            while self.peek().text == ",":
                self.take(",")
                args.append(self.expr())
            close = self.take(")")
            if (len(args) == 1) != (token.text == "abs"):
                raise MiniLangError(f"{token.text}() cannot take {len(args)} argument(s)", token.start)
            return Node("call", token.text, tuple(args), token.start, close.end)
        if token.kind == "name" and not keyword.iskeyword(token.text):
            self.i += 1
            return Node("name", token.text, (), token.start, token.end)
        self.fail("an expression")


def parse(source):
    """The Program in `source`, or MiniLangError."""
    if not isinstance(source, str):
        raise MiniLangError("a program must be a string")
    if len(source) > MAX_SOURCE:
        raise MiniLangError(f"program longer than {MAX_SOURCE} characters")
    return _Parser(source).program(source)


# ---------------------------------------------------------------------------------------------------
# Interpreter

def _checked(value, position=None):
    if type(value) is not int:
        raise MiniLangError(f"{value!r} is not an integer", position)
    if abs(value) > MAX_VALUE:
        raise MiniLangError(f"integer beyond the limit of {MAX_VALUE}", position)
    return value


def _evaluate(node, env, budget):
    budget[0] -= 1
    if budget[0] < 0:
        raise MiniLangError(f"more than {MAX_STEPS} evaluation steps", node.start)
    if node.kind == "int":
        return node.value
    if node.kind == "name":
        if node.value not in env:
            raise MiniLangError(f"unknown name {node.value!r}", node.start)
        return env[node.value]
    if node.kind == "if":  # like Python: the test first, then only the branch it picks
        if_true, test, if_false = node.children
        return _evaluate(if_true if _evaluate(test, env, budget) else if_false, env, budget)
    values = [_evaluate(child, env, budget) for child in node.children]
    if node.kind == "compare":
        return COMPARISONS[node.value](*values)
    if node.kind == "neg":
        return _checked(-values[0], node.start)
    if node.kind == "call":
        function = BUILTINS[node.value]
        return _checked(function(values[0]) if node.value == "abs" else function(values), node.start)
    if node.value in ("//", "%") and values[1] == 0:
        raise MiniLangError(f"{'division' if node.value == '//' else 'modulo'} by zero", node.start)
    return _checked(ARITHMETIC[node.value](*values), node.start)


def run(program, args):
    """The integer program(*args) returns, or MiniLangError."""
    if len(args) != len(program.params):
        raise MiniLangError(f"{program.name}() takes {len(program.params)} arguments, not {len(args)}")
    env = {name: _checked(value) for name, value in zip(program.params, args)}
    return _evaluate(program.body, env, [MAX_STEPS])


def passes(source, tests):
    """(n_passed, n_total) for tests [(args, expected), ...]. Never raises on any string: a program
    that does not parse fails every test, and a MiniLangError while running fails that test."""
    try:
        program = parse(source)
    except MiniLangError:
        return 0, len(tests)
    passed = 0
    for args, expected in tests:
        try:
            passed += run(program, args) == expected
        except MiniLangError:
            pass
    return passed, len(tests)
