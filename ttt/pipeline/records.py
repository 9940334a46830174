"""What a record (an evaluation record of `ttt run`, the `--json` file of `ttt eval`, a pipeline's `pipeline.json`)
says about where things were, without the machine that wrote it.

A record names a checkpoint by its cache key (`DATASET/AGENT-PROFILE-<key>`, `ttt.pipeline.keys.checkpoint_ref`) and
its content by `checkpoint_sha256`; any other path it keeps (a checkpoint, data directory, expert or pipeline file
the run named) is written by `portable_path`: relative to the working directory (the repository a study runs in),
else under a placeholder for a root every machine has (`$TTT_CACHE`, `$TMPDIR`, `~`); `local_path` reads it back on
this machine. Records carry `schema` (`SCHEMA`); records of schema 1 (no `schema` key) held this machine's absolute
paths, and `benchmarks/migrations/records_schema2.py` rewrote every committed one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ttt.data.files import default_cache

SCHEMA = 2  # 2: no machine paths (placeholders, cache keys), `ttgs_path` on every graph-search row
PATH_KEYS = ("checkpoint", "data_dir", "expert")  # the run keys that hold a path


def _roots(cache: str | os.PathLike | None = None) -> list[tuple[Path, str]]:
    """(root, how a record writes it), the most specific first."""
    roots = [(Path(cache).expanduser() if cache else default_cache(), "$TTT_CACHE"), (Path.cwd(), "."),
             (Path(tempfile.gettempdir()), "$TMPDIR"), (Path.home(), "~")]  # fmt: skip
    out = []
    for root, name in roots:
        try:
            root = root.resolve()
        except OSError:
            continue
        if len(root.parts) > 1:  # never the file system's root (a run started in /)
            out.append((root, name))
    return sorted(out, key=lambda r: len(r[0].parts), reverse=True)


def portable_path(path: str | os.PathLike, cache: str | os.PathLike | None = None) -> str:
    """`path` as a record writes it: a relative path as given; an absolute one relative to the working directory
    when inside it, else under `$TTT_CACHE` (the cache root, `cache` or the default), `$TMPDIR` or `~` (the deepest
    root that holds it); a path under none of them by its last two parts (`.../parent/name`; what it held is the
    record's digest)."""
    text = os.fspath(path)
    p = Path(text).expanduser()
    if not p.is_absolute():
        return Path(text).as_posix()
    try:
        p = p.resolve()
    except OSError:
        pass
    for root, name in _roots(cache):
        try:
            rel = p.relative_to(root)
        except ValueError:
            continue
        if name == ".":
            return rel.as_posix() or "."
        return name if not rel.parts else f"{name}/{rel.as_posix()}"
    return ".../" + "/".join(p.parts[-2:])


def local_path(ref: str, cache: str | os.PathLike | None = None) -> Path:
    """The path on this machine of what a record names (`portable_path`'s placeholders expanded; a relative path
    from the working directory)."""
    for name, root in (("$TTT_CACHE", lambda: Path(cache).expanduser() if cache else default_cache()),
                       ("$TMPDIR", lambda: Path(tempfile.gettempdir()))):  # fmt: skip
        if ref == name or ref.startswith(name + "/"):
            return root() / ref[len(name) + 1 :]
    return Path(ref).expanduser()


def portable_run(run: dict, cache: str | os.PathLike | None = None) -> dict:
    """A run's keys as a record keeps them: its paths (`PATH_KEYS`) by `portable_path`. None of them is in an
    evaluation's content key (`ttt.pipeline.keys.eval_settings`), so the key is the same on every machine."""
    return {k: portable_path(v, cache) if k in PATH_KEYS and isinstance(v, str) else v for k, v in run.items()}
