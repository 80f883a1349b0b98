"""No module of the project imports one that imports it back, directly or through others, at the
top of a file or inside a function; and the core never imports the lab. A package and its own
modules are left out of it (data/__init__.py's get_task imports the task modules, which take
Example from the package: Python's way of making a package, not a circle between studies)."""
import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_name(path):
    return os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")


def imports(path, modules):
    """The project's modules a file imports anywhere in it (a lazy import inside a function too)."""
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def graph(root=ROOT):
    paths = [p for pattern in ("*.py", "data/*.py", "experiments/*.py", "exercises/*.py",
                               "integrations/*.py", "integrations/*/*.py")
             for p in glob.glob(os.path.join(root, pattern))]
    modules = {module_name(p) if root == ROOT else os.path.relpath(p, root)[:-3].replace(os.sep, ".")
               .removesuffix(".__init__"): p for p in paths}
    family = lambda a, b: a.startswith(b + ".") or b.startswith(a + ".")
    return {name: {m for m in imports(path, modules) if m != name and not family(m, name)}
            for name, path in modules.items()}


def cycles(edges):
    """Every circle in a graph {module: {modules it imports}}, each as the list of its modules."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_cycles_finds_a_circle_through_a_lazy_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it():
    assert cycles(graph()) == []


def test_the_core_never_imports_the_lab():
    for name, imported in graph().items():
        if "." not in name:  # a top-level file
            assert not any(m.startswith("experiments") for m in imported), (name, imported)


def test_the_bridges_stand_apart():
    """integrations/ (verl's reward manager, ...) reads the core and the data layer, never the lab;
    nothing else imports it, so the core runs without verl installed."""
    edges = graph()
    assert any(name.startswith("integrations.") for name in edges)
    for name, imported in edges.items():
        if name.startswith("integrations"):
            assert not any(m.startswith("experiments") for m in imported), (name, imported)
        else:
            assert not any(m.startswith("integrations") for m in imported), (name, imported)
