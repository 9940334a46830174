"""Helpers shared by the CLI test files: call the CLI in-process and check its one-line errors."""

from __future__ import annotations

from ttt.cli import main

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
