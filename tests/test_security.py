"""Issue 75: nothing runs, leaks, crashes or hangs from a file a user is handed, and no setting is silently replaced.

One test (or a few) per fault class the issue lists; each fails on the commit before the fix (docs/security.md):
arrays built by the reader (no pickled dtype state, no ndarray constructor), bounded work (cycles, shared
references, codecs, size caps, FIFOs, deep nesting), values checked (step counts, kernels), unsupported settings
before sizes, names escaped, checkpoint metadata / records / pipelines / datasets on the safe path, and a setting
the user wrote never replaced by a checkpoint's. The property tests that mutate files are in test_security_fuzz.py.
"""

from __future__ import annotations

import codecs
import json
import os
import pickle
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import STITCH, one_line_error, run, within

from ttt import safe_pickle
from ttt.checkpoint import init_state, open_checkpoint, read_meta, save_checkpoint
from ttt.data import generate as gen
from ttt.errors import TttError
from ttt.interop import export_checkpoint, read_reference, reference_states
from ttt.presets import make_configs

_RECONSTRUCT = np._core.multiarray._reconstruct




class _R:
    """Pickles as whatever `__reduce__` tuple it is given (a crafted file, as an attacker writes one)."""

    def __init__(self, *reduce):
        self.reduce = reduce

    def __reduce__(self):
        return self.reduce


def _refused(data: bytes, match: str = "refused") -> str:
    with within(5), pytest.raises(TttError, match=match) as e:
        safe_pickle.loads(data, "x.pkl")
    line = str(e.value)
    assert "\n" not in line and "\x1b" not in line and len(line) < 1000, line
    return line


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("security")
    gen.generate(STITCH, episodes=2, seed=0, directory=d, workers=1)
    return d


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    """A genuine OGBench-format GC-IQL pickle (`ttt export ogbench` of a small untrained checkpoint)."""
    from ttt.checkpoint import config_dict
    from ttt.data.specs import get_spec
    from ttt.presets import agent_backbone

    d = tmp_path_factory.mktemp("good")
    cfg, sampler = make_configs("gciql", get_spec(STITCH), "cpu", dict(actor_hidden_dims=(8, 6),
                                value_hidden_dims=(7, 5), batch_size=8))  # fmt: skip
    backbone = agent_backbone("gciql")
    states = jax.vmap(lambda k: init_state(k, backbone, 2, 2, cfg))(jax.random.split(jax.random.key(3), 1))
    meta = dict(agent="gciql", backbone=backbone.name, config=config_dict(cfg), sampler=config_dict(sampler),
                dataset=STITCH, dataset_hash="0" * 16, obs_dim=2, action_dim=2, seeds=1, seed=0, profile="test")
    save_checkpoint(d / "ck", states, meta)
    return export_checkpoint(open_checkpoint(d / "ck"), d / "params_1.pkl").read_bytes()


def _with(good: bytes, edit) -> bytes:
    obj = pickle.loads(good)
    edit(obj["agent"])
    return pickle.dumps(obj, protocol=4)


def _import(tmp_path, data_dir, blob: bytes, capsys, *extra: str) -> tuple[int, str]:
    pkl = tmp_path / "in.pkl"
    pkl.write_bytes(blob)
    out = tmp_path / "out"
    rc, so, err = run(["import", "ogbench", str(pkl), "--agent", "gciql", "--dataset", STITCH, "--out", str(out),
                       "--dir", str(data_dir), *extra], capsys)  # fmt: skip
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    return rc, err


# ------------------------------------------------------------- 1. arrays are built by the reader, not by NumPy


def test_a_pickled_dtype_state_never_reaches_numpy():
    """Fields, offsets outside the item, subarrays, objects and complex numbers are refused; only plain numbers."""
    _refused(pickle.dumps(np.zeros(4, dtype=[("a", "<f4")])), "dtype V4")
    leaking = _R(np.dtype, ("V8", False, True), (3, "|", None, ("a",), {"a": (np.dtype("f8"), 64)}, 8, 1, 16))
    _refused(pickle.dumps(_R(_RECONSTRUCT, (np.ndarray, (0,), b"b"), (1, (4,), leaking, False, bytes(32)))))
    _refused(pickle.dumps(np.zeros((2, 2), np.complex64)), "complex numbers")
    sub = _R(np.dtype, ("V12", False, True), (3, "|", (np.dtype("f4"), (3,)), None, None, 12, 4, 16))
    _refused(pickle.dumps(_R(_RECONSTRUCT, (np.ndarray, (0,), b"b"), (1, (2,), sub, False, bytes(24)))))
    _refused(pickle.dumps(np.array([1, "x"], dtype=object)), "array of Python objects")
    _refused(pickle.dumps(np.array(["ab"])), "dtype")


def test_ndarray_is_not_a_constructor_the_file_can_call():
    """An uninitialised array, or 4 bytes declared as a 1e9-wide layer by zero strides, are refused."""
    f4 = np.dtype("f4")
    _refused(pickle.dumps(_R(np.ndarray, ((10**9,), f4, b"\0" * 4, 0, (0,)))), "a call of numpy.ndarray")
    _refused(pickle.dumps(_R(np.ndarray, ((4,), f4))), "a call of numpy.ndarray")


def test_array_bytes_must_be_exactly_shape_times_itemsize():
    for shape in ((100,), (10**9,), (-1,)):
        _refused(pickle.dumps(_R(_RECONSTRUCT, (np.ndarray, (0,), b"b"),
                                 (1, shape, np.dtype("f4"), False, bytes(8)))))  # fmt: skip


def test_a_build_on_an_allowed_name_changes_nothing():
    """BUILD with a slot state on Flax's FrozenDict stand-in once set attributes on the loader's own function."""
    blob = b"\x80\x02cflax.core.frozen_dict\nFrozenDict\nN}X\x06\x00\x00\x00markerK\x01s\x86b."
    _refused(blob, "BUILD")
    for kind in safe_pickle.ALLOWED.values():
        assert isinstance(kind, str)  # placeholders, not objects the file can reach


def test_genuine_arrays_round_trip_bit_for_bit():
    tree = {"k": jnp.arange(6.0).reshape(2, 3), "n": np.int32(4), "u": np.array([1, 2], ">u4"), "b": b"",
            "f": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "h": np.float16(2), "e": np.zeros((0, 3), np.int8),
            "t": np.array([True, False]), "shared": [np.ones(3)] * 3}  # fmt: skip
    for protocol in (2, 3, 4, 5):
        got = safe_pickle.loads(pickle.dumps(tree, protocol=protocol))
        for k, v in tree.items():
            if k == "shared":
                assert all(np.array_equal(x, np.ones(3)) for x in got[k])
            elif k == "b":
                assert got[k] == b""
            else:
                a, b = np.asarray(v), np.asarray(got[k])
                assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (protocol, k)


# ------------------------------------------------------------------------------------------- 2. bounded work


def test_a_self_referencing_list_is_refused_at_once():
    x: list = []
    x.append(x)
    assert len(pickle.dumps(x, protocol=2)) < 30
    _refused(pickle.dumps(x, protocol=2), "cycle")
    d: dict = {}
    d["agent"] = {"network": d}
    _refused(pickle.dumps(d), "cycle")


def test_shared_references_take_linear_time():
    x: list = [np.zeros(1, np.float32)]
    for _ in range(60):
        x = [x, x]
    blob = pickle.dumps(x, protocol=4)
    assert len(blob) < 2000
    _refused(blob, "unfolded")
    ok = [np.zeros(1)] * 1000  # shared leaves are fine (a fresh agent's target network is its critic)
    assert len(safe_pickle.loads(pickle.dumps(ok))) == 1000


def test_codecs_encode_takes_latin1_only():
    for codec in ("punycode", "rot13", "zlib_codec", "utf-16"):
        _refused(pickle.dumps(_R(codecs.encode, ("x" * 10, codec))), "latin1")
    assert safe_pickle.loads(pickle.dumps(b"\x00\xff", protocol=2)) == b"\x00\xff"  # protocol 2 bytes: latin1


def test_size_is_checked_before_reading(tmp_path):
    p = tmp_path / "big.pkl"
    p.write_bytes(pickle.dumps(np.zeros(1000)))
    with pytest.raises(TttError, match="more than the 100"):
        safe_pickle.load(p, max_bytes=100)
    fifo = tmp_path / "fifo.pkl"
    os.mkfifo(fifo)
    with within(5), pytest.raises(TttError, match="not a regular file"):
        safe_pickle.load(fifo)
    with pytest.raises(TttError, match="is a directory"):
        safe_pickle.load(tmp_path)


def test_deep_nesting_is_one_line_not_a_recursion_error():
    n = 200_000
    _refused(b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".", "nested deeper")
    _refused(b"\x80\x02" + b"(" * n + b"t" * n + b".", "refused|not a readable")


def test_other_opcodes_and_protocols_are_refused():
    _refused(pickle.dumps({1, 2}), "a set")
    _refused(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueR.", r"names os\.system")
    with pytest.raises(TttError, match="not a pickle"):
        safe_pickle.loads(pickle.dumps([1], protocol=0))
    _refused(b"\x80\x02]q\x00h\x05.", "memo reference")


# ---------------------------------------------------------------------------- 3. values from the file checked


@pytest.mark.parametrize("step, match", [(float("inf"), "not an integer"), (2**70, "out of range"),
                                         ("5", "not an integer"), (True, "not an integer"), (-3, "out of range"),
                                         (np.array([1, 2]), "not an integer")])  # fmt: skip
def test_step_counts_are_integers_in_range(tmp_path, good, step, match):
    p = tmp_path / "p.pkl"
    p.write_bytes(_with(good, lambda a: a["network"].__setitem__("step", step)))
    with pytest.raises(TttError, match=match):
        read_reference(p)


@pytest.mark.parametrize("value, match", [(np.zeros((4, 8), np.complex64), "complex numbers"),
                                          (np.zeros((4, 8), ">f8"), None),
                                          ([["a"] * 8] * 4, "not an array of real numbers"),
                                          ("kernel", "not an array of real numbers"),
                                          (np.zeros((4, 0), np.float32), "not a matrix")])  # fmt: skip
def test_kernels_are_arrays_of_real_numbers(tmp_path, good, value, match):
    p = tmp_path / "p.pkl"
    p.write_bytes(_with(good, lambda a: a["network"]["params"]["modules_actor"]["actor_net"]["Dense_0"]
                        .__setitem__("kernel", value)))  # fmt: skip
    if match == "complex numbers":
        with pytest.raises(TttError, match=match):
            read_reference(p)
        return
    src = read_reference(p)
    if match is None:  # another float width is read (and cast), not refused
        reference_states([src], "gciql", {})
        return
    with pytest.raises(TttError, match=match):
        reference_states([src], "gciql", {})


# ------------------------------------------------------------------------ 4. unsupported settings before sizes


def test_a_discrete_action_actor_is_refused_before_any_size_is_read(tmp_path, data_dir, good, capsys):
    def discrete(a):
        actor = a["network"]["params"]["modules_actor"]
        actor["logit_net"] = actor.pop("mean_net")

    blob = _with(good, discrete)
    for extra in ((), ("--set", "discrete=true")):
        rc, err = _import(tmp_path, data_dir, blob, capsys, *extra)
        assert rc == 2 and "discrete" in one_line_error(err), err
    rc, err = _import(tmp_path, data_dir, good, capsys, "--set", "discrete=true")  # the setting alone, too
    assert rc == 2 and "discrete=True is not supported" in one_line_error(err)

    def visual(a):  # OGBench's GCActor with an encoder: its input width is the encoder's, not observation + goal
        actor = a["network"]["params"]["modules_actor"]
        actor["gc_encoder"] = {"Dense_0": {"kernel": np.zeros((64, 3), np.float32), "bias": np.zeros(3, np.float32)}}

    rc, err = _import(tmp_path, data_dir, _with(good, visual), capsys)
    assert rc == 2 and "encoder is not supported" in one_line_error(err), err


# ------------------------------------------------------------------------------------- 5. names are escaped


def test_names_from_the_file_are_escaped_and_cut(tmp_path, data_dir, good, capsys):
    fake = "\x1b[2K\rimported 1 seed(s) of gciql -> ok\n"
    for name in (fake, fake + "x" * 2_000_000):
        blob = _with(good, lambda a, n=name: a["network"]["params"].__setitem__(n, {}))
        rc, err = _import(tmp_path, data_dir, blob, capsys)
        line = one_line_error(err)
        assert rc == 2 and "\x1b" not in err and "\r" not in err and len(err) < 3000, err[:300]
        assert "\\x1b[2K\\rimported" in line, line


# ------------------------------------------------------------------- 6. every file a user hands is read safely


def _meta_dir(tmp_path, text: str | None = None, fifo: bool = False):
    ck = tmp_path / "ck"
    ck.mkdir(exist_ok=True)
    if fifo:
        os.mkfifo(ck / "meta.json")
    else:
        (ck / "meta.json").write_text(text)
    return ck


def test_checkpoint_metadata_is_read_safely(tmp_path, capsys):
    ck = _meta_dir(tmp_path, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(TttError, match="nested deeper"):
        read_meta(ck)
    rc, _, err = run(["eval", str(ck), "--episodes", "1"], capsys)
    assert rc == 2 and "nested deeper" in one_line_error(err)
    (ck / "meta.json").unlink()
    _meta_dir(tmp_path, fifo=True)
    with within(5):
        rc, _, err = run(["export", "ogbench", str(ck), "--out", str(tmp_path / "x.pkl")], capsys)
    assert rc == 2 and "not a regular file" in one_line_error(err)
    assert not (tmp_path / "x.pkl").exists()


def test_checkpoint_state_leaves_must_match_the_metadata(tmp_path, good):
    """A state file whose first .npy header declares 1e11 numbers is refused before any data is read (no allocation
    of a size the file chose), even with a matching sha256 in its metadata."""
    import hashlib
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(next(iter(tmp_path.parent.glob("good*/ck"))), ck)
    meta = json.loads((ck / "meta.json").read_text())
    state = ck / meta["state_file"]
    data = bytearray(state.read_bytes())
    assert data[:8] == b"\x93NUMPY\x01\x00"
    hlen = int.from_bytes(data[8:10], "little")
    header = repr({"descr": "<f4", "fortran_order": False, "shape": (10**11,)}).encode()
    data[10 : 10 + hlen] = header.ljust(hlen - 1) + b"\n"
    state.write_bytes(bytes(data))
    meta["state_sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (ck / "meta.json").write_text(json.dumps(meta))
    with within(10), pytest.raises(TttError, match="cannot read checkpoint state.*expected"):
        open_checkpoint(ck).load()


def test_pipeline_files_are_read_safely(tmp_path, capsys):
    from ttt.pipeline.config import load_pipeline

    p = tmp_path / "deep.toml"
    p.write_text("name = 'p'\na = " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(TttError, match="nested deeper"):
        load_pipeline(p)
    p.write_text('name = "p"\n"\\u001b[2Kevil\\n" = 1\n[[run]]\n')
    rc, _, err = run(["run", str(p), "--dry-run"], capsys)
    assert rc == 2 and "\x1b" not in err and one_line_error(err)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with within(5):
        rc, _, err = run(["run", str(fifo), "--dry-run"], capsys)
    assert rc == 2 and "not a regular file" in one_line_error(err)


def test_records_and_flags_are_read_safely(tmp_path, capsys):
    from ttt.pipeline.report import load_results

    (tmp_path / "results.json").write_text("[" * 100_000)
    with pytest.raises(TttError, match="not valid JSON"):
        load_results(tmp_path)
    flags = tmp_path / "flags.json"
    flags.write_text('{"agent": ' * 100_000)
    rc, _, err = run(["import", "ogbench", "x.pkl", "--agent", "gciql", "--dataset", STITCH, "--out",
                      str(tmp_path / "o"), "--flags", str(flags)], capsys)  # fmt: skip
    assert rc == 2 and "nested deeper" in one_line_error(err) and not (tmp_path / "o").exists()


def test_datasets_are_read_safely(tmp_path, monkeypatch):
    """Declared sizes are checked before decompressing (no zip bomb); only plain numeric arrays are read."""
    import ttt.safe_files as sf
    from ttt.data.files import read_npz

    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, observations=np.zeros((1 << 20,), np.float32), actions=np.zeros(1, np.float32),
                        terminals=np.zeros(1, bool))  # fmt: skip
    assert bomb.stat().st_size < 100_000
    monkeypatch.setattr(sf, "MAX_NPZ_BYTES", 1 << 20)
    with pytest.raises(TttError, match="declare"):
        read_npz(bomb)
    monkeypatch.undo()
    odd = tmp_path / "odd.npz"
    np.savez(odd, observations=np.zeros(3, dtype=[("a", "f4")]), actions=np.zeros(1), terminals=np.zeros(1, bool))
    with pytest.raises(TttError, match="only plain numbers"):
        read_npz(odd)
    from ttt.safe_files import safe_load_npz

    text = tmp_path / "text.npz"  # ttt's own parts keep a JSON string: text is data, read as such
    np.savez(text, compute=np.asarray('{"cpus": 2}'), x=np.arange(3))
    assert str(safe_load_npz(text)["compute"]) == '{"cpus": 2}'
    with zipfile.ZipFile(tmp_path / "evil.npz", "w") as z:
        z.writestr("observations.npy", pickle.dumps(_R(os.system, ("true",))))
    with pytest.raises(TttError, match="unreadable|not an OGBench"):
        read_npz(tmp_path / "evil.npz")


# ---------------------------------------------------------------- 7. a setting the user wrote is never dropped


def test_defaults_that_contradict_a_checkpoint_stop_with_both_values(tmp_path, capsys):
    """Issue 75's case: [defaults] dataset = large navigate, a checkpoint of medium navigate: one line naming both,
    in the dry run and the real run (which read the pipeline the same way), nothing written."""
    meta = dict(agent="gcbc", backbone="gcbc", config={}, dataset="pointmaze-medium-navigate-v0",
                dataset_hash="0" * 16, obs_dim=2, action_dim=2, seeds=2, state_file="state-000000004.eqx", step=4,
                sampler={}, profile="cpu")  # fmt: skip
    ck = _meta_dir(tmp_path, json.dumps(meta))
    p = tmp_path / "p.toml"
    p.write_text(f'name = "p"\n[defaults]\ndataset = "pointmaze-large-navigate-v0"\n[[run]]\nname = "r"\n'
                 f'checkpoint = "{ck}"\n')  # fmt: skip
    for extra in (["--dry-run"], ["--out", str(tmp_path / "out")]):
        rc, _, err = run(["run", str(p), *extra], capsys)
        line = one_line_error(err)
        assert rc == 2 and '"pointmaze-large-navigate-v0"' in line and '"pointmaze-medium-navigate-v0"' in line, line
    assert not (tmp_path / "out").exists()


def test_set_values_nested_too_deep_are_one_line(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    rc, _, err = run(["run", "quickstart", "--dry-run", "--set", f"tasks={deep}"], capsys)
    assert rc == 2 and "nested deeper" in one_line_error(err)
    rc, _, err = run(["import", "ogbench", "x.pkl", "--agent", "gciql", "--dataset", STITCH, "--out",
                      str(tmp_path / "o"), "--set", f"alpha={deep}"], capsys)  # fmt: skip
    assert rc == 2 and "nested deeper" in one_line_error(err) and not (tmp_path / "o").exists()


def test_load_run_and_eval_stop_on_a_dataset_other_than_the_checkpoints(tmp_path, good, data_dir, capsys):
    """`ttt.load_run(dataset=...)` and `ttt eval --dataset` agree with the checkpoint or name both datasets."""
    import ttt

    ck = next(iter(tmp_path.parent.glob("good*/ck")))
    other = "pointmaze-medium-navigate-v0"
    with pytest.raises(TttError, match=f"trained on {STITCH}, not on {other}"):
        ttt.load_run(ck, data_dir=data_dir, dataset=other)
    rc, _, err = run(["eval", str(ck), "--dataset", other, "--dir", str(data_dir)], capsys)
    assert rc == 2 and f"trained on {STITCH}, not on {other}" in one_line_error(err)


def test_generation_reads_an_existing_sidecar_safely(tmp_path):
    """`ttt data generate` asks an existing dataset's sidecar whether this plan made it: a sidecar that is a list,
    nested too deep or a FIFO means "no" (it was an AttributeError, a RecursionError, a hang)."""
    from ttt.data.generate import GenerationPlan, _generated_by
    from ttt.data.specs import get_spec

    plan = GenerationPlan(get_spec(STITCH), 2, 0, get_spec(STITCH).noise, None)
    train, val = tmp_path / f"{STITCH}.npz", tmp_path / f"{STITCH}-val.npz"
    train.write_bytes(b""), val.write_bytes(b"")
    for text in ("[]", "[" * 100_000 + "]" * 100_000, None):
        side = train.with_suffix(".json")
        side.unlink(missing_ok=True)
        if text is None:
            os.mkfifo(side)
        else:
            side.write_text(text)
        with within(5):
            assert _generated_by(plan, train, val) is False


def test_checkpoint_sizes_from_the_metadata_are_checked_against_the_state_file(tmp_path, good):
    """A meta.json declaring 10**9 seeds (or observation size 10**6) with the state's true sha256: refused before
    a seed key or an array of that size is made (it was an 8 GB allocation before the first leaf was read)."""
    import shutil

    for key, value, match in (("seeds", 10**9, "seeds do not fit"), ("obs_dim", 10**6, "need")):
        ck = tmp_path / key
        shutil.copytree(next(iter(tmp_path.parent.glob("good*/ck"))), ck)
        meta = json.loads((ck / "meta.json").read_text())
        meta[key] = value
        (ck / "meta.json").write_text(json.dumps(meta))
        with within(10), pytest.raises(TttError, match=f"cannot read checkpoint state.*{match}"):
            open_checkpoint(ck).load()
