"""Shared by every test file: compiled programs are released after each module, so that the whole suite runs in one
process.

Why: each executable XLA compiles holds about 3.5 memory mappings of the process (its code, read-only data and data
sections) for as long as JAX's caches keep it, and Linux refuses new mappings past `vm.max_map_count` (65530 by
default), where LLVM's JIT segfaults instead of reporting the failed allocation. Without this fixture one process
passed 55,000 mappings by the suite's 180th test and crashed in XLA's CPU compiler soon after
(`python benchmarks/analyses/map_count_repro.py` shows the growth and the fix; benchmarks/results/layout/).
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile

import pytest


def _persistent_compilation_cache() -> None:
    """Compiled programs are kept on disk for the session (JAX's persistent compilation cache in a temporary folder),
    set here before JAX is imported so that the test processes and the CLI subprocesses the tests start all use it.

    Why: the release after each module (below) throws away every compiled program, and many programs are the same
    in the next module (the small eager operations of every agent initialisation, the tiny checkpoints' training
    step, the episodes the subprocess tests rerun): reading one back costs a fraction of compiling it. The cache is
    keyed by the program, the JAX/XLA versions and the XLA flags, so a hit is the executable a compile would give.
    Each pytest-xdist worker has its own folder (two workers never write one entry at once). A folder the caller
    names with JAX_COMPILATION_CACHE_DIR is used as it is and kept."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ and "TTT_TESTS_JAX_CACHE_ROOT" not in os.environ:
        return  # the caller's own cache
    root = os.environ.get("TTT_TESTS_JAX_CACHE_ROOT")
    if root is None:  # the first process of the run (xdist's controller, or the only one): workers inherit the root
        root = tempfile.mkdtemp(prefix="ttt-tests-jax-cache-")
        os.environ["TTT_TESTS_JAX_CACHE_ROOT"] = root
        atexit.register(shutil.rmtree, root, ignore_errors=True)
    folder = os.path.join(root, os.environ.get("PYTEST_XDIST_WORKER", "main"))
    os.makedirs(folder, exist_ok=True)
    settings = dict(JAX_COMPILATION_CACHE_DIR=folder, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")  # fmt: skip
    os.environ.update(settings)
    if "jax" in sys.modules:  # imported before this file (by a plugin): the environment was read already
        import jax

        for name, value in settings.items():
            jax.config.update(name.lower(), value if name.endswith("DIR") else int(value))


# XLA's CPU backend with LLVM's optimisation off and its older fusion emitters: the suite's programs are small and
# run a few times, so compiling them is most of its CPU time. Measured on this project's 2-core CPU,
# `python -m pytest -n 0 tests/test_grid.py`: 146.6 s of user CPU with the default flags, 85.9 s with the first two
# flags; the whole suite 1791 CPU-s with those two, 1130 CPU-s with the emitters flag added (one episode program of
# tests/test_lazy_values.py compiles in 2.2-2.8 s instead of 5.8-8.8 s). Numbers are float32 either way; with the
# older emitters two different programs that compute the same values may differ in the last bit of a float, so the
# tests that compare two programs use tests/helpers.py's `assert_same_values` (exact on integers and booleans, float32
# rounding on floats; bit for bit under the default flags), the multi-device subprocess tests included.
# XLA_FLAGS that already set the optimisation level are left as they are; TTT_TESTS_DEFAULT_XLA=1 keeps XLA's
# default flags.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
                      "--xla_cpu_use_fusion_emitters=false")  # fmt: skip


def _fast_compile() -> None:
    """Set before JAX is imported, so the test processes and the CLI subprocesses they start all inherit it."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags and os.environ.get("TTT_TESTS_DEFAULT_XLA") != "1":
        os.environ["XLA_FLAGS"] = f"{FAST_COMPILE_FLAGS} {flags}".strip()


_fast_compile()
_persistent_compilation_cache()

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
    if "jax" not in sys.modules:
        return
    _PEAK["before_release"] = max(_PEAK["before_release"], _mappings())
    import jax

    setup = sys.modules.get("ttt.evaluation.setup")
    if setup is not None:
        setup.cached_program.cache_clear()
    jax.clear_caches()
    gc.collect()
    _PEAK["after_release"] = max(_PEAK["after_release"], _mappings())


def pytest_terminal_summary(terminalreporter):
    if _PEAK["before_release"]:
        terminalreporter.write_line(
            f"memory mappings: at most {_PEAK['before_release']} at the end of a test module, "
            f"{_PEAK['after_release']} after releasing its programs (vm.max_map_count is usually 65530)"
        )
