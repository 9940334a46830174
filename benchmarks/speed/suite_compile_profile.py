"""Where the test suite's time goes: a pytest plugin that sums JAX's compile events per test file.

Usage (from the repository root; one JSON per pytest-xdist worker, then a table):

    PYTHONPATH=benchmarks/speed TTT_COMPILE_PROFILE=/tmp/prof python -m pytest -p suite_compile_profile
    python benchmarks/speed/suite_compile_profile.py /tmp/prof

Per test file: the tests' own durations (setup + call + teardown) and, inside them, JAX's tracing
(`jaxpr_trace_duration`), lowering to MLIR (`jaxpr_to_mlir_module_duration`) and XLA's compile
(`backend_compile_duration`), with the number of compiles and the compiled functions' names. CLI subprocesses that
the tests start are not seen (their time is in the test's duration only).
"""

from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path

EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_current = ["<collection>"]
_seconds: dict = collections.defaultdict(lambda: collections.defaultdict(float))
_count: dict = collections.defaultdict(lambda: collections.defaultdict(int))
_by_function: dict = collections.defaultdict(lambda: [0.0, 0])


def _listen(event: str, duration: float, **kwargs) -> None:
    phase = EVENTS.get(event)
    if phase is None:
        return
    file = _current[0].split("::")[0]
    _seconds[file][phase] += duration
    _count[file][phase] += 1
    if phase == "compile":
        entry = _by_function[kwargs.get("fun_name", "?")]
        entry[0] += duration
        entry[1] += 1


def pytest_configure(config) -> None:
    import jax

    jax.monitoring.register_event_duration_secs_listener(_listen)


def pytest_runtest_setup(item) -> None:
    _current[0] = item.nodeid


def pytest_runtest_logreport(report) -> None:
    _seconds[report.nodeid.split("::")[0]]["test"] += report.duration


def pytest_sessionfinish(session) -> None:
    folder = os.environ.get("TTT_COMPILE_PROFILE")
    controller = "PYTEST_XDIST_WORKER" not in os.environ and session.config.pluginmanager.hasplugin("dsession")
    if not folder or controller:  # xdist's controller sees the workers' reports again
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    doc = {"files": {f: {"seconds": dict(v), "count": dict(_count[f])} for f, v in _seconds.items()},
           "compiled_functions": {k: {"seconds": v[0], "count": v[1]} for k, v in _by_function.items()}}  # fmt: skip
    (Path(folder) / f"{name}.json").write_text(json.dumps(doc, indent=1))


def _table(folder: str) -> None:
    files: dict = collections.defaultdict(lambda: collections.defaultdict(float))
    functions: dict = collections.defaultdict(lambda: [0.0, 0])
    for path in sorted(Path(folder).glob("*.json")):
        doc = json.loads(path.read_text())
        for f, v in doc["files"].items():
            for k, s in v["seconds"].items():
                files[f][k] += s
            files[f]["n_compile"] += v["count"].get("compile", 0)
        for k, v in doc["compiled_functions"].items():
            functions[k][0] += v["seconds"]
            functions[k][1] += v["count"]
    total = collections.Counter()
    print(f"{'test s':>7} {'trace':>6} {'lower':>6} {'compile':>7} {'n':>5}  file")
    for f, v in sorted(files.items(), key=lambda x: -x[1]["test"]):
        print(f"{v['test']:7.1f} {v['trace']:6.1f} {v['lower']:6.1f} {v['compile']:7.1f} {int(v['n_compile']):5d}  {f}")
        total.update(v)
    print(f"{total['test']:7.1f} {total['trace']:6.1f} {total['lower']:6.1f} {total['compile']:7.1f} "
          f"{int(total['n_compile']):5d}  all files")  # fmt: skip
    print("\nthe most expensive compiled functions (seconds, compiles):")
    for k, (s, n) in sorted(functions.items(), key=lambda x: -x[1][0])[:15]:
        print(f"{s:7.1f} {n:5d}  {k}")


if __name__ == "__main__":
    _table(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TTT_COMPILE_PROFILE", "."))
