"""The project's tests; a package, so that exercises/ imports its checks by name (tests.test_align)."""
