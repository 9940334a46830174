"""Shared by every test file: compiled programs are released after each module, so that the whole suite runs in one
process.

Why: each executable XLA compiles holds about 3.5 memory mappings of the process (its code, read-only data and data
sections) for as long as JAX's caches keep it, and Linux refuses new mappings past `vm.max_map_count` (65530 by
default), where LLVM's JIT segfaults instead of reporting the failed allocation. Without this fixture one process
passed 55,000 mappings by the suite's 180th test and crashed in XLA's CPU compiler soon after
(`python benchmarks/map_count_repro.py` shows the growth and the fix; benchmarks/results/layout/).
"""

from __future__ import annotations

import gc

import pytest

_PEAK = {"before_release": 0, "after_release": 0}


def _mappings() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test module: drop JAX's compiled executables (and the evaluation program cache that holds some),
    then collect, which unmaps their memory."""
    yield
    import sys

    if "jax" not in sys.modules:
        return
    _PEAK["before_release"] = max(_PEAK["before_release"], _mappings())
    import jax

    evaluate = sys.modules.get("ttt.evaluate")
    if evaluate is not None:
        evaluate._PROGRAMS.clear()
    jax.clear_caches()
    gc.collect()
    _PEAK["after_release"] = max(_PEAK["after_release"], _mappings())


def pytest_terminal_summary(terminalreporter):
    if _PEAK["before_release"]:
        terminalreporter.write_line(
            f"memory mappings: at most {_PEAK['before_release']} at the end of a test module, "
            f"{_PEAK['after_release']} after releasing its programs (vm.max_map_count is usually 65530)"
        )
