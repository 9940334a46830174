"""The fault-injection script (benchmarks/reliability/fault_injection.py) in miniature: one random signal lands on a
running `ttt data generate` and one on a running `ttt pretrain`; each stops as promised and the rerun's results equal
an uninterrupted run's; and two writers at once into one folder, cache and output. The full run (many kills, `ttt
run` too, a full tmpfs) is the script itself."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


@pytest.mark.slow
def test_kills_are_survived_and_reruns_are_identical(monkeypatch):
    # The commands compile from scratch, as they do for a user: the script draws its kill times from the reference
    # run's duration, which a compilation cache warmed by that run would make unlike the reruns' (tests/conftest.py).
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "reliability" / "fault_injection.py"
    spec = importlib.util.spec_from_file_location("fault_injection", path)
    fi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fi)
    doc = fi.main(["--kills", "1", "--commands", "data,pretrain", "--seed", "1", "--faults", "", "--out", ""])
    assert doc["kills"] == 2 and doc["survived"] == 2 and doc["all_identical"], doc


@pytest.mark.slow
def test_concurrent_writers_for_real(tmp_path):
    """Two real processes at once: two `data generate` into one folder, two `ttt run` into one fresh cache, and
    `--only base` beside `--only mc` into one --out (the script's 'concurrent' fault; its 'disk' fault needs root)."""
    fi = _script()
    doc = fi.concurrent_probe(tmp_path)
    assert doc["ok"], doc


def _script():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "reliability" / "fault_injection.py"
    spec = importlib.util.spec_from_file_location("fault_injection", path)
    fi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fi)
    return fi
