"""What the command groups share: the progress display, byte sizes, the dataset-name check and `--set` parsing."""

from __future__ import annotations

import sys
import time

import click

from ttt.errors import TttError
from ttt.safe_files import TooDeep, loads_json, show

SAVED = "finished work is saved; rerun the same command to resume"
_interrupt = {"note": SAVED}


def interrupt_note(note: str | None = None) -> str:
    """What the line printed on SIGINT / SIGTERM says about the work done (`note`: set it; None: read it). A
    command that saves nothing as it goes (`ttt eval` without `--json`) says so instead of promising a resume."""
    if note is not None:
        _interrupt["note"] = note
    return _interrupt["note"]


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class ProgressBar:
    """Progress of long work: ``bar(done, total, **fields)``.

    On a terminal, a rich progress bar (done / total, the fields, elapsed, time left) that appears on its first
    update, so that errors found before any work starts are not preceded by an empty bar. Elsewhere (a log file, a
    batch job, CI), where a live bar would print nothing until the end, one plain line on stderr every ``every_s``
    seconds and when done."""

    def __init__(self, description: str, unit: str = "episodes", every_s: float = 30.0):
        self.description = description
        self.unit = unit
        self.every_s = every_s
        self.bar = None
        self.terminal = sys.stdout.isatty()
        self.t0 = self.start = self.last_line = None
        self.state = None  # (done, total, fields) of the last update
        self.printed = None  # the update last printed as a line

    def __call__(self, done: int, total: int, **fields) -> None:
        info = "  ".join(f"{k} {v}" for k, v in fields.items())
        if not self.terminal:
            now = time.perf_counter()
            if self.t0 is None:
                self.t0, self.start, self.last_line = now, done, now
            self.state = (done, total, info)
            if (now - self.last_line >= self.every_s or done >= total) and self.state != self.printed:
                self._line(now)
            return
        if self.bar is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
            )
            self.task = self.bar.add_task(self.description, total=total, completed=done, info=info)
            self.bar.start()
        self.bar.update(self.task, completed=done, total=total, info=info)

    def _line(self, now: float) -> None:
        done, total, info = self.state
        elapsed = now - self.t0
        rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
        eta = f"eta {clock((total - done) / rate)}" if rate > 0 and done < total else ""
        parts = [f"{self.description} {done}/{total} {self.unit}", info, f"{clock(elapsed)} elapsed", eta]
        click.echo("  ".join(p for p in parts if p), err=True)
        self.last_line, self.printed = now, self.state

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.state is not None and self.state != self.printed:
            self._line(time.perf_counter())


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def dataset_name(ctx, param, value):
    from ttt.data.specs import get_spec

    get_spec(value)  # unknown names list the valid ones
    return value


def parse_json_sets(pairs: tuple[str, ...]) -> dict:
    """`--set key=value` pairs; values parse as JSON where they can (numbers, lists, booleans), else strings."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise TttError(f"--set expects key=value, got '{pair}'")
        k, v = pair.split("=", 1)
        try:
            out[k.strip()] = loads_json(v, f"--set {show(k.strip())}")
        except TooDeep:  # (json recurses: refused, not a RecursionError)
            raise
        except TttError:
            out[k.strip()] = v
    return out


def setting_options(names: tuple[str, ...]):
    """Click options derived from the settings' one declaration (`ttt.settings.SETTINGS`): each setting's option,
    type (its choices), default and help, so a setting declared there is an option of the command (docs/reference.md,
    the settings table). A list of integers is written comma-separated; a table as repeatable KEY=VALUE options."""
    from ttt.settings import SETTINGS, option_name

    def option(name: str) -> dict:
        s = SETTINGS[name]
        text = s.help[0].upper() + s.help[1:] + "."
        if s.kind == "bool":
            return dict(is_flag=True, default=s.default, help=text)
        if s.kind == "table":
            return dict(multiple=True, metavar="KEY=VALUE", help=text + " Repeatable: --ttgs KEY=VALUE per field.")
        if s.kind == "list[int]":
            return dict(type=str, default=",".join(map(str, s.default)), show_default=True, help=text)
        kind = click.Choice(s.choices) if isinstance(s.choices, tuple) else {"int": int, "float": float, "str": str}
        kind = kind if isinstance(kind, click.Choice) else kind[s.kind]
        default = s.default if s.stage == "eval" else None  # a row's data or checkpoint: the checkpoint's
        return dict(type=kind, default=default, show_default=default is not None, help=text)

    def decorate(f):
        for name in reversed(names):
            f = click.option(option_name(name), name, **option(name))(f)
        return f

    return decorate
