"""Issue 75, item 6: property tests that mutate valid files a user may hand `ttt` (an OGBench agent pickle,
checkpoint metadata, a pipeline, a dataset) by truncating, flipping bytes, nesting, repeating and inflating them, and
check that each read ends in a clean success or one `TttError` line, within a time and memory bound, with nothing
written (docs/security.md). Sized to run in seconds (derandomized: the same examples every run)."""

from __future__ import annotations

import json
import pickle
import tracemalloc

import jax
import numpy as np
import pytest
from helpers import STITCH, one_line_error, run, within
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttt import safe_pickle
from ttt.checkpoint import init_state, open_checkpoint, read_meta, save_checkpoint
from ttt.data import generate as gen
from ttt.errors import TttError
from ttt.interop import export_checkpoint, read_reference, reference_states
from ttt.presets import make_configs

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip




MUTATION = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10**9)),
    st.tuples(st.just("flip"), st.integers(0, 10**9), st.integers(1, 255)),
    st.tuples(st.just("repeat"), st.integers(0, 10**9), st.integers(1, 64), st.integers(2, 60)),
    st.tuples(st.just("nest"), st.integers(1, 20_000)),
    st.tuples(st.just("inflate"), st.integers(0, 10**9), st.sampled_from([2**31 - 1, 2**32 - 1, 10**6, 2**16])),
)
"""One change to a file: cut it, flip a byte, repeat a slice, nest it (`nest`: per file kind), write a large
number over 4 bytes (a length field, a size)."""


def mutate(blob: bytes, m: tuple, nest) -> bytes:
    n = max(len(blob), 1)
    if m[0] == "truncate":
        return blob[: m[1] % n]
    if m[0] == "flip":
        i = m[1] % n
        return blob[:i] + bytes([blob[i] ^ m[2]]) + blob[i + 1 :]
    if m[0] == "repeat":
        i = m[1] % n
        return blob[:i] + blob[i : i + m[2]] * m[3] + blob[i:]
    if m[0] == "nest":
        return nest(blob, m[1])
    i = m[1] % n
    return blob[:i] + m[2].to_bytes(4, "little") + blob[i + 4 :]


def _one_line(e: TttError) -> None:
    line = str(e)
    from ttt.safe_files import one_line

    shown = one_line(line)
    assert "\n" not in shown and "\x1b" not in shown and len(shown) <= 2100


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A genuine GC-IQL pickle (protocol 4 as exported, and protocol 2), its checkpoint and dataset."""
    from ttt.checkpoint import config_dict
    from ttt.data.specs import get_spec
    from ttt.presets import agent_backbone

    d = tmp_path_factory.mktemp("fuzz")
    gen.generate(STITCH, episodes=2, seed=0, directory=d / "data", workers=1)
    cfg, sampler = make_configs("gciql", get_spec(STITCH), "cpu", dict(actor_hidden_dims=(4,), value_hidden_dims=(3,),
                                batch_size=8))  # fmt: skip
    backbone = agent_backbone("gciql")
    states = jax.vmap(lambda k: init_state(k, backbone, 2, 2, cfg))(jax.random.split(jax.random.key(3), 1))
    meta = dict(agent="gciql", backbone=backbone.name, config=config_dict(cfg), sampler=config_dict(sampler),
                dataset=STITCH, dataset_hash="0" * 16, obs_dim=2, action_dim=2, seeds=1, seed=0, profile="test")
    save_checkpoint(d / "ck", states, meta)
    pkl = export_checkpoint(open_checkpoint(d / "ck"), d / "params_1.pkl").read_bytes()
    return dict(root=d, pkl4=pkl, pkl2=pickle.dumps(pickle.loads(pkl), protocol=2))


def _nest_pickle(blob: bytes, k: int) -> bytes:
    """[[...[obj]...]] k deep: EMPTY_LIST k times, the object, APPEND k times."""
    if len(blob) < 3 or blob[-1:] != b".":
        return blob
    return blob[:2] + b"]" * k + blob[2:-1] + b"a" * k + b"."


@FAST
@given(m=MUTATION, protocol=st.sampled_from(["pkl4", "pkl2"]))
def test_mutated_agent_pickles_load_cleanly_or_are_refused(files, tmp_path, m, protocol):
    blob = mutate(files[protocol], m, _nest_pickle)
    tracemalloc.start()
    try:
        with within(3):
            try:
                obj = safe_pickle.loads(blob, "fuzz.pkl")
            except TttError as e:
                _one_line(e)
                return
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(blob) + (8 << 20), peak  # memory bounded by the file's size
    p = tmp_path / "ok.pkl"
    p.write_bytes(blob)
    with within(30):  # what import does next: the outline, the sizes, the arrays into a ttt agent
        try:
            reference_states([read_reference(p)], "gciql", {})
        except TttError as e:
            _one_line(e)
    del obj


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(m=MUTATION)
def test_mutated_pickles_through_the_command_line(files, tmp_path_factory, capsys, m):
    d = tmp_path_factory.mktemp("cli")
    pkl = d / "in.pkl"
    pkl.write_bytes(mutate(files["pkl4"], m, _nest_pickle))
    out = d / "out"
    with within(60):
        rc, _, err = run(["import", "ogbench", str(pkl), "--agent", "gciql", "--dataset", STITCH, "--out", str(out),
                          "--dir", str(files["root"] / "data")], capsys)  # fmt: skip
    if rc != 0:
        assert rc == 2
        one_line_error(err)
        assert not out.exists(), "a refused import wrote its checkpoint"
    assert sorted(p.name for p in d.iterdir()) == (["in.pkl", "out"] if rc == 0 else ["in.pkl"])


def _nest_json(blob: bytes, k: int) -> bytes:
    return b"[" * k + blob + b"]" * k


@FAST
@given(m=MUTATION)
def test_mutated_checkpoint_metadata_is_read_cleanly_or_refused(files, tmp_path, m):
    import shutil

    ck = tmp_path / "ck"
    if ck.exists():
        shutil.rmtree(ck)
    shutil.copytree(files["root"] / "ck", ck)
    (ck / "meta.json").write_bytes(mutate((ck / "meta.json").read_bytes(), m, _nest_json))
    before = sorted(p.name for p in ck.iterdir())
    with within(30):
        try:
            read_meta(ck)
            open_checkpoint(ck).load()
        except TttError as e:
            _one_line(e)
    assert sorted(p.name for p in ck.iterdir()) == before


PIPELINE = b'name = "p"\n[defaults]\nepisodes = 1\ntasks = [1, 2]\n[[run]]\nname = "r"\nvariant = "base"\n'


def _nest_toml(blob: bytes, k: int) -> bytes:
    return blob + b"\n[[run]]\nname = 'n'\ntasks = " + b"[" * k + b"1" + b"]" * k + b"\n"


@FAST
@given(m=MUTATION)
def test_mutated_pipelines_load_cleanly_or_are_refused(tmp_path, m):
    from ttt.pipeline.config import load_pipeline

    p = tmp_path / "p.toml"
    p.write_bytes(mutate(PIPELINE, m, _nest_toml))
    with within(10):
        try:
            load_pipeline(p)
        except TttError as e:
            _one_line(e)


def _nest_zip(blob: bytes, k: int) -> bytes:
    import io
    import zipfile

    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        z.writestr("observations.npy", blob[: k % (len(blob) + 1)])
    return b.getvalue()


@FAST
@given(m=MUTATION)
def test_mutated_datasets_are_read_cleanly_or_refused(files, tmp_path, m):
    from ttt.data.files import read_npz

    src = files["root"] / "data" / f"{STITCH}-val.npz"
    p = tmp_path / "d.npz"
    p.write_bytes(mutate(src.read_bytes(), m, _nest_zip))
    with within(10):
        try:
            arrays = read_npz(p)
        except TttError as e:
            _one_line(e)
            return
    assert all(a.dtype.kind in "biuf" for a in arrays.values())


def test_the_fuzzed_files_are_valid_before_mutation(files, tmp_path):
    """The starting points load: a mutation that changes nothing is a clean success."""
    for k in ("pkl4", "pkl2"):
        p = tmp_path / f"{k}.pkl"
        p.write_bytes(files[k])
        reference_states([read_reference(p)], "gciql", {})
    assert json.loads((files["root"] / "ck" / "meta.json").read_text())["agent"] == "gciql"
    np.testing.assert_equal(open_checkpoint(files["root"] / "ck").seeds, 1)
