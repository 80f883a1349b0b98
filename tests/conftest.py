"""Before any test imports torch: MKL's reproducible mode, as the lab sets it (experiments/__init__.py),
so that the runs the tests make in this process and the resumed runs they start as subprocesses
compute the same way."""
import os

os.environ.setdefault("MKL_CBWR", "AUTO")
