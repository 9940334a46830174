"""Helpers shared by the test files: call the CLI in-process and check its one-line errors; compare the arrays of
two programs that must compute the same values."""

from __future__ import annotations

import contextlib
import os
import signal

import numpy as np

from ttt.cli import main

# The suite compiles with XLA's older CPU fusion emitters (tests/conftest.py, FAST_COMPILE_FLAGS). Two different
# programs that compute the same values (the lazy and the full value pass, an empty selection and the base policy)
# may then differ in the last bit of a float, where XLA's default emitters give bit-identical arrays. With
# TTT_TESTS_DEFAULT_XLA=1 (XLA's default flags) `assert_same_values` compares bit for bit again.
BITWISE = "xla_cpu_use_fusion_emitters=false" not in os.environ.get("XLA_FLAGS", "")


def assert_same_values(x, y, err_msg: str = "") -> None:
    """Equal arrays: integers, booleans (selections, counts, success) always exactly; floats exactly under XLA's
    default emitters, else to float32 rounding (rtol 1e-5, atol 1e-6)."""
    x, y = np.asarray(x), np.asarray(y)
    if BITWISE or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(y.dtype, np.floating)):
        np.testing.assert_array_equal(x, y, err_msg=err_msg)
    else:
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=err_msg)


STITCH = "pointmaze-medium-stitch-v0"
TINY = ["--set", "actor_hidden_dims=[8,8]", "--set", "value_hidden_dims=[8,8]", "--set", "batch_size=8"]


def run(argv, capsys):
    """`ttt ARGV` in this process: (exit code, stdout, stderr)."""
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line_error(err: str) -> str:
    """The single `error: ...` line of stderr (asserts there is exactly one and no traceback)."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith("error: "), err
    return lines[0]


def pretrain_argv(dataset: str, steps: int, out, data_dir, seeds: int = 2, chunk: int = 2) -> list[str]:
    """`ttt pretrain` arguments for a tiny GC-BC run."""
    return ["pretrain", "--dataset", dataset, "--agent", "gcbc", "--steps", str(steps), "--chunk", str(chunk),
            "--seeds", str(seeds), "--out", str(out), "--dir", str(data_dir), *TINY]  # fmt: skip


def select_round(key, tables, data, state_xy, cfg, goal_eps, row_values=None, *, params=None):
    """One round of the library's own stages from plain arguments: `ttt.select.round_weights` of the round's
    `Context` (the state's goal coordinates `state_xy`, the selection key `key`)."""
    from ttt.select import Context, round_weights

    ctx = Context(data=data, goal_eps=goal_eps, cfg=cfg, params=params, state_xy=state_xy, key=key,
                  row_values=row_values, tables=tables)  # fmt: skip
    return round_weights(ctx)


@contextlib.contextmanager
def within(seconds: float):
    """Fail (TimeoutError) when the block runs longer than `seconds` (SIGALRM; the main thread)."""

    def _alarm(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
