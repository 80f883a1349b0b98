"""Before any test imports torch: MKL's reproducible mode, as the lab sets it (experiments/__init__.py),
so that the runs the tests make in this process and the resumed runs they start as subprocesses
compute the same way.

The tiers. `python -m pytest -q` runs the fast tier: every test not marked slow or ray (a newcomer's
check: about 20 s on 2 idle CPU cores, minutes beside another job). `python -m pytest -q -m slow` runs the slow tier (torch.compile,
whole tiny runs, several processes); `python -m pytest -q -m ray` the lab on Ray (with
experiments/requirements-ray.txt installed); any -m is obeyed as written, so `-m "slow or not slow"` runs
all. A test file named on the command line (`python -m pytest tests/test_cuda.py`) runs whole, its
slow tests too: asking for a file asks for all of it.
"""
import os

os.environ.setdefault("MKL_CBWR", "AUTO")


def pytest_collection_modifyitems(config, items):
    if config.option.markexpr:  # -m given: pytest's own selection, as written
        return
    named = {os.path.abspath(arg.split("::")[0]) for arg in config.args}
    named = {path for path in named if os.path.isfile(path)}
    slow = [item for item in items if (item.get_closest_marker("slow") or item.get_closest_marker("ray"))
            and str(item.path) not in named]
    if slow:
        config.hook.pytest_deselected(items=slow)
        left_out = set(slow)
        items[:] = [item for item in items if item not in left_out]
