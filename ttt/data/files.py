"""Dataset files on disk: where they live, listing, and format/content/checksum checks; `load` -> `Dataset`."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import numpy as np

from ttt.data.specs import SPECS, DatasetSpec, get_spec
from ttt.errors import TttError
from ttt.safe_files import read_json, safe_load_npz
from ttt.storage import array_digest

OGBENCH_DEFAULT_DIR = "~/.ogbench/data"  # ogbench.utils.DEFAULT_DATASET_DIR
REQUIRED_KEYS = ("observations", "actions", "terminals")
INFO_KEYS = ("qpos", "qvel")
MAX_POINT_STEP = 0.5  # largest xy move of a point-maze step within an episode (0.283 plus contact push-back)


def default_dir() -> Path:
    """OGBench's default dataset directory (where `ogbench.make_env_and_datasets` looks)."""
    return Path(os.path.expanduser(OGBENCH_DEFAULT_DIR))


def default_cache() -> Path:
    """`ttt run`'s artifact cache: $TTT_CACHE, else ~/.cache/ttt (datasets in CACHE/data/NAME-e<episodes>-s<seed>/)."""
    return Path(os.environ.get("TTT_CACHE") or "~/.cache/ttt").expanduser()


def resolve_dir(directory: str | os.PathLike | None, create_default: bool = False, writable: bool = False) -> Path:
    """The dataset directory: `directory`, or OGBench's default. An explicit one must already exist."""
    if directory is None:
        path = default_dir()
        if create_default:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise TttError(f"cannot create the default dataset directory {path}: {e.strerror}") from None
        elif not path.is_dir():
            raise TttError(
                f"the default dataset directory {path} does not exist; generate a dataset first "
                "(ttt data generate NAME) or name the directory that holds it (data_dir=... in Python, --dir at the "
                "command line)"
            )
    else:
        path = Path(directory).expanduser()
        if not path.exists():
            raise TttError(
                f"directory {path} does not exist; create it first or leave it out (data_dir / --dir) "
                f"to use OGBench's default {default_dir()}"
            )
        if not path.is_dir():
            raise TttError(f"{path} is not a directory")
    if writable:
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".ttt-write-probe-"):
                pass
        except OSError as e:
            raise TttError(f"directory {path} is not writable: {e.strerror}") from None
    return path


def read_npz(path: Path, spec: DatasetSpec | None = None) -> dict[str, np.ndarray]:
    """Read an OGBench-format .npz fully with `ttt.safe_files.safe_load_npz` (plain numeric arrays, sizes checked
    before decompressing, no pickle), with one-line errors for missing, truncated or foreign files."""
    path = Path(path)
    if not path.exists():
        hint = f"; generate it with `ttt data generate {spec.name}`" if spec else ""
        raise TttError(f"{path}: no such file{hint}")
    return safe_load_npz(path, required=REQUIRED_KEYS)


@dataclasses.dataclass(frozen=True)
class CheckReport:
    path: Path
    rows: int
    episodes: int
    bytes: int
    ob_dim: int
    action_dim: int


def check_arrays(path: Path, arrays: dict[str, np.ndarray], spec: DatasetSpec) -> CheckReport:
    """Validate keys, dtypes, shapes, terminal layout and contents against the dataset's environment."""

    def fail(msg: str):
        raise TttError(f"{path}: {msg}")

    obs, act, term = arrays["observations"], arrays["actions"], arrays["terminals"]
    if obs.ndim != 2:
        fail(f"observations must be 2-D (rows, {spec.ob_dim}), got shape {obs.shape}")
    if obs.shape[1] != spec.ob_dim:
        fail(
            f"observation size {obs.shape[1]} does not match {spec.env_id}, whose observations have "
            f"{spec.ob_dim} numbers"
        )
    rows = obs.shape[0]
    if act.ndim != 2 or act.shape[1] != spec.action_dim:
        fail(f"actions must have shape (rows, {spec.action_dim}) for {spec.env_id}, got {act.shape}")
    if term.ndim != 1:
        fail(f"terminals must be 1-D, got shape {term.shape}")
    for k in ("actions", "terminals", *[k for k in INFO_KEYS if k in arrays]):
        if len(arrays[k]) != rows:
            fail(f"{k} has {len(arrays[k])} rows but observations have {rows}")
    if rows == 0:
        fail("the dataset has no rows")
    for k, want in (("observations", np.float32), ("actions", np.float32), ("terminals", np.bool_)):
        if arrays[k].dtype != want:
            fail(f"{k} must have dtype {np.dtype(want).name}, got {arrays[k].dtype}")
    for k in ("observations", "actions", *[k for k in INFO_KEYS if k in arrays]):
        if not np.all(np.isfinite(arrays[k])):
            fail(f"{k} has non-finite values (first at row {int(np.argmax(~np.isfinite(arrays[k]).all(-1)))})")
    if np.abs(act).max() > 1.0:
        fail(f"actions must lie in [-1, 1], found {float(np.abs(act).max()):.3g}")

    ends = np.flatnonzero(term)
    if len(ends) == 0 or ends[-1] != rows - 1:
        fail("the last row must be terminal (OGBench marks each episode's last row)")
    lengths = np.diff(np.concatenate([[-1], ends]))
    bad = np.flatnonzero(lengths != spec.episode_rows)
    if len(bad):
        fail(
            f"episode {bad[0]} has {lengths[bad[0]]} rows; every {spec.name} episode has {spec.episode_rows} "
            "(terminal at its last row)"
        )

    if spec.family == "pointmaze":
        if "qpos" in arrays and not np.allclose(arrays["qpos"], obs, atol=1e-6):
            fail("observations must equal qpos for a point maze")
    if spec.family == "antmaze" and "qpos" in arrays:
        nq = arrays["qpos"].shape[1]
        if not np.allclose(obs[:, :nq], arrays["qpos"], atol=1e-5):
            fail("an ant maze observation must start with the ant's qpos (xy first)")
    if spec.is_maze:
        _check_maze_contents(fail, obs[:, :2], spec)
    return CheckReport(path, rows, len(ends), path.stat().st_size, obs.shape[1], act.shape[1])


def _check_maze_contents(fail, obs: np.ndarray, spec: DatasetSpec) -> None:
    import gymnasium
    import ogbench  # noqa: F401

    env = gymnasium.make(spec.env_id).unwrapped
    ij = np.stack([((obs[:, 1] + 4 + 2) // 4), ((obs[:, 0] + 4 + 2) // 4)], -1).astype(np.int64)
    inside = (ij[:, 0] >= 0) & (ij[:, 0] < env.maze_map.shape[0]) & (ij[:, 1] >= 0) & (ij[:, 1] < env.maze_map.shape[1])
    if not inside.all():
        fail(f"row {int(np.argmin(inside))} lies outside the {spec.maze_type} maze")
    in_wall = env.maze_map[ij[:, 0], ij[:, 1]] != 0
    if in_wall.any():
        fail(f"row {int(np.argmax(in_wall))} lies inside a wall of the {spec.maze_type} maze")
    if spec.family == "pointmaze" and spec.maze_type != "teleport":
        # qpos += 0.2 * clip(a, -1, 1) moves at most 0.283 a step; wall contacts can add a little; teleports jump.
        step = np.linalg.norm(np.diff(obs, axis=0), axis=-1)
        ep_last = np.zeros(len(obs) - 1, bool)
        ep_last[np.arange(spec.episode_rows - 1, len(obs) - 1, spec.episode_rows)] = True
        jumps = (step > MAX_POINT_STEP) & ~ep_last
        if jumps.any():
            fail(
                f"row {int(np.argmax(jumps))} moves {step[jumps][0]:.3f} in one step; a point moves at most "
                f"{MAX_POINT_STEP} per step within an episode (are the terminals misplaced?)"
            )


def check_digest(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Compare the arrays with the sha256 that generation recorded in the sidecar `NAME.json` / `NAME-val.json`
    (when there is one): changed bytes that still form a valid file are reported, naming both digests."""
    sidecar = Path(path).with_suffix(".json")
    if not sidecar.exists():
        return
    try:
        doc = read_json(sidecar)
    except TttError:
        raise TttError(f"{sidecar}: unreadable metadata (truncated or not JSON); regenerate the dataset") from None
    want = doc.get("sha256_arrays") if isinstance(doc, dict) else None
    if want is None:
        return
    got = array_digest(arrays)
    if got != want:
        raise TttError(
            f"{path}: contents changed since generation (sha256 of its arrays {got[:16]}..., {sidecar.name} records "
            f"{want[:16]}...); regenerate it: `ttt data generate {Path(path).stem.removesuffix('-val')} --force` with "
            "the same --episodes and --seed"
        )


def check(name: str, directory: str | os.PathLike | None = None) -> list[CheckReport]:
    """Check NAME.npz and NAME-val.npz: format, contents, and that ogbench.load_dataset reads them."""
    spec = get_spec(name)
    d = resolve_dir(directory)
    reports = []
    for path in (d / f"{name}.npz", d / f"{name}-val.npz"):
        arrays = read_npz(path, spec)
        reports.append(check_arrays(path, arrays, spec))
        check_digest(path, arrays)
        _check_ogbench_loads(path)
    return reports


def _check_ogbench_loads(path: Path) -> None:
    import ogbench

    try:
        regular = ogbench.load_dataset(str(path), compact_dataset=False)
        compact = ogbench.load_dataset(str(path), compact_dataset=True)
    except Exception as e:  # noqa: BLE001  (any failure inside ogbench is a format problem)
        raise TttError(f"{path}: ogbench.load_dataset cannot read it: {type(e).__name__}: {e}") from None
    n_ep = int(compact["terminals"].sum() - compact["valids"].size + compact["valids"].sum())
    if len(regular["observations"]) != int(compact["valids"].sum()) or n_ep < 0:
        raise TttError(f"{path}: ogbench.load_dataset gives inconsistent transitions")


def list_datasets(directory: str | os.PathLike | None = None) -> list[dict]:
    """Dataset files in the directory: known names with train/val sizes, other .npz files, partial runs."""
    d = resolve_dir(directory)
    out = []
    seen = set()
    for name in SPECS:
        train, val = d / f"{name}.npz", d / f"{name}-val.npz"
        if train.exists() or val.exists():
            meta = {}
            if train.with_suffix(".json").exists():
                try:
                    meta = read_json(train.with_suffix(".json"))
                except TttError:
                    meta = {}
                meta = meta if isinstance(meta, dict) else {}
            out.append(
                dict(
                    name=name,
                    train_bytes=train.stat().st_size if train.exists() else None,
                    val_bytes=val.stat().st_size if val.exists() else None,
                    episodes=meta.get("episodes"),
                    seed=meta.get("seed"),
                    status="complete" if train.exists() and val.exists() else "incomplete",
                )
            )
            seen |= {train.name, val.name}
    for p in sorted(d.glob("*.npz")):
        if p.name not in seen:
            out.append(
                dict(
                    name=p.stem,
                    train_bytes=p.stat().st_size,
                    val_bytes=None,
                    episodes=None,
                    seed=None,
                    status="unknown name",
                )
            )
    for p in sorted(d.glob(".*.partial-*")):
        n_blocks = len(list(p.glob("split*.npz")))
        out.append(
            dict(
                name=p.name[1:].split(".partial-")[0],
                train_bytes=None,
                val_bytes=None,
                episodes=None,
                seed=None,
                status=f"partial run ({n_blocks} blocks cached; rerun generate to resume)",
            )
        )
    return out


def load(name: str | DatasetSpec, directory: str | os.PathLike | None = None, split: str = "train"):
    """Read, check and build the device-resident `Dataset` of NAME (or of a `DatasetSpec`; `split` 'train' or
    'val')."""
    from ttt.data.dataset import Dataset

    if split not in ("train", "val"):
        raise TttError(f"split must be 'train' or 'val', got '{split}'")
    spec = name if isinstance(name, DatasetSpec) else get_spec(name)
    name = spec.name
    path = resolve_dir(directory) / (f"{name}.npz" if split == "train" else f"{name}-val.npz")
    arrays = read_npz(path, spec)
    check_arrays(path, arrays, spec)
    check_digest(path, arrays)
    return Dataset.from_arrays(arrays["observations"], arrays["actions"], arrays["terminals"], goal_fn=spec.goal_coords)
