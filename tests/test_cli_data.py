"""`ttt data` at the command line: bad input gives one line naming the file and the problem, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import one_line_error, run

from ttt.data import generate as gen
from ttt.storage import atomic_save_npz

NAV = "pointmaze-medium-navigate-v0"




@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    gen.generate(NAV, episodes=2, seed=0, directory=d, workers=1)
    return d


def test_generate_list_check_through_cli(tmp_path, capsys):
    rc, out, err = run(["data", "generate", "pointmaze-medium-stitch-v0", "--episodes", "3", "--dir",
                        str(tmp_path), "--workers", "1"], capsys)
    assert rc == 0, err
    assert "3 episodes, 603 rows" in out and "1 episodes, 201 rows" in out
    rc, out, _ = run(["data", "list", "--dir", str(tmp_path)], capsys)
    assert rc == 0 and "pointmaze-medium-stitch-v0" in out and "complete" in out
    rc, out, _ = run(["data", "check", "pointmaze-medium-stitch-v0", "--dir", str(tmp_path)], capsys)
    assert rc == 0 and out.count("ok ") == 2


def test_unknown_name_lists_valid_ones(capsys):
    rc, _, err = run(["data", "generate", "pointmaze-tiny-navigate-v0"], capsys)
    line = one_line_error(err)
    assert rc == 2
    assert "unknown dataset 'pointmaze-tiny-navigate-v0'" in line
    assert "pointmaze-medium-navigate-v0" in line and "cube-single-play-v0" in line


def test_missing_directory(tmp_path, capsys):
    missing = tmp_path / "nope"
    rc, _, err = run(["data", "check", NAV, "--dir", str(missing)], capsys)
    assert rc == 2 and "does not exist" in one_line_error(err)
    rc, _, err = run(["data", "generate", NAV, "--episodes", "1", "--dir", str(missing), "--workers", "1"], capsys)
    assert rc == 0 and (missing / f"{NAV}.npz").exists(), err  # generate creates its directory
    rc, _, err = run(["data", "check", NAV, "--dir", str(tmp_path / "nope2")], capsys)
    assert rc == 2 and "does not exist" in one_line_error(err)


def test_unwritable_directory(tmp_path, capsys):
    if os.geteuid() == 0:  # root writes anywhere chmod allows nothing; /sys refuses even root
        target = "/sys"
    else:
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(0o500)
    rc, _, err = run(["data", "generate", NAV, "--episodes", "1", "--dir", str(target)], capsys)
    assert rc == 2 and "not writable" in one_line_error(err) and str(target) in err


def test_directory_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    rc, _, err = run(["data", "list", "--dir", str(f)], capsys)
    assert rc == 2 and "is not a directory" in one_line_error(err)


def test_truncated_npz(small, tmp_path, capsys):
    for suffix in ("", "-val"):
        data = (small / f"{NAV}{suffix}.npz").read_bytes()
        (tmp_path / f"{NAV}{suffix}.npz").write_bytes(data[: len(data) // 2])
    rc, _, err = run(["data", "check", NAV, "--dir", str(tmp_path)], capsys)
    line = one_line_error(err)
    assert rc == 2 and f"{NAV}.npz" in line and "truncated or corrupt" in line


def test_foreign_npz(tmp_path, capsys):
    np.savez(tmp_path / f"{NAV}.npz", images=np.zeros((3, 4)), labels=np.arange(3))
    rc, _, err = run(["data", "check", NAV, "--dir", str(tmp_path)], capsys)
    line = one_line_error(err)
    assert rc == 2 and f"{NAV}.npz" in line and "missing key(s) observations, actions, terminals" in line


def test_observation_size_mismatch(small, tmp_path, capsys):
    with np.load(small / f"{NAV}.npz") as f:
        arrays = {k: f[k] for k in f.files}
    arrays["observations"] = np.concatenate([arrays["observations"], arrays["observations"][:, :1]], axis=1)
    atomic_save_npz(tmp_path / f"{NAV}.npz", arrays)
    rc, _, err = run(["data", "check", NAV, "--dir", str(tmp_path)], capsys)
    line = one_line_error(err)
    assert rc == 2 and f"{NAV}.npz" in line
    assert "observation size 3 does not match pointmaze-medium-v0" in line and "2 numbers" in line


def test_misplaced_terminals(small, tmp_path, capsys):
    with np.load(small / f"{NAV}.npz") as f:
        arrays = {k: f[k] for k in f.files}
    arrays["terminals"] = np.roll(arrays["terminals"], -1)  # last row no longer terminal
    atomic_save_npz(tmp_path / f"{NAV}.npz", arrays)
    rc, _, err = run(["data", "check", NAV, "--dir", str(tmp_path)], capsys)
    assert rc == 2 and "last row must be terminal" in one_line_error(err)


def test_console_script_exit_code_and_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ttt.cli", "data", "check", NAV, "--dir", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / (NAV + '.npz')}: no such file; generate it with " \
                                  f"`ttt data generate {NAV}`"
