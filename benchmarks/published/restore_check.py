"""Restore an OGBench-format agent pickle (e.g. one `ttt` exported) into the REFERENCE agent of a parity fixture and
write its forwards on the fixture's evaluation rows. Runs in the reference venv (benchmarks/published/setup.sh):

    /work/cache/published/venv/bin/python benchmarks/published/restore_check.py \
        --case tests/fixtures/parity/ogbench-gciql-ddpgbc --pkl exported.pkl --out forwards.npz

The agent is created with the case's config (case.json) by the reference's own `create`, then restored by the
reference's own `utils.flax_utils.restore_agent` (the pickle is linked as params_E.pkl in a temporary folder). The
NPZ holds `eval_<output>` for every output the fixture stores as `eval_<output>_{init,final}` (temperature-0
actions and the value-like forwards, see the case's case.json), computed as benchmarks/published/parity.py computes
them. Exit status 1 with one line on stderr when the restore fails.

flax's from_state_dict only checks that every key of the agent is present: it ignores extra keys and never checks
shapes or dtypes. Unless --lenient, this script also requires the pickle's state dict to have exactly the keys of a
freshly created reference agent, with the same shapes and dtypes (the step may be a Python int or an integer array).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import parity  # noqa: E402


def structure_problems(expected: dict, got: dict) -> list[str]:
    """Differences between two flattened state dicts (parity.flatten_state)."""
    problems = [f"missing key {k}" for k in expected if k not in got]
    problems += [f"unexpected key {k}" for k in got if k not in expected]
    for k, e in expected.items():
        g = got.get(k)
        if g is None or e.get("empty_dict") or g.get("empty_dict"):
            if g is not None and bool(e.get("empty_dict")) != bool(g.get("empty_dict")):
                problems.append(f"{k}: expected {e}, got {g}")
            continue
        if e["shape"] != g["shape"]:
            problems.append(f"shape mismatch at {k}: expected {tuple(e['shape'])}, got {tuple(g['shape'])}")
        elif k.endswith("network/step"):
            if g["dtype"] != "python int" and not np.issubdtype(np.dtype(g["dtype"]), np.integer):
                problems.append(f"dtype mismatch at {k}: expected an integer, got {g['dtype']}")
        elif e["dtype"] != g["dtype"]:
            problems.append(f"dtype mismatch at {k}: expected {e['dtype']}, got {g['dtype']}")
    return problems


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--case", type=Path, required=True, help="a fixture folder holding case.json and data.npz")
    p.add_argument("--pkl", type=Path, required=True, help="the OGBench-format pickle to restore")
    p.add_argument("--out", type=Path, required=True, help="the NPZ to write")
    p.add_argument("--ogbench", type=Path, default=Path("/work/cache/ogbench-impls"), help="OGBench's impls/")
    p.add_argument("--authors", type=Path,
                   default=Path(os.environ.get("PUBLISHED_ROOT", "/work/cache/published")) / "meta-gc-rl",
                   help="meta-gc-rl checkout at 434aa5e (default $PUBLISHED_ROOT/meta-gc-rl)")  # fmt: skip
    p.add_argument(
        "--lenient",
        action="store_true",
        help="accept what the reference's restore_agent accepts (extra keys, other shapes or dtypes)",
    )
    a = p.parse_args()
    try:
        case = json.loads((a.case / "case.json").read_text())
        data = np.load(a.case / "data.npz")
    except (OSError, ValueError) as e:
        parity.fail(f"restore_check: cannot read the case {a.case}: {e}")
    if not a.pkl.is_file():
        parity.fail(f"restore_check: no file {a.pkl}")
    # The reference's restore_agent (and the structure check below) unpickle the file with pickle.load: it must first
    # pass ttt's own reader, which interprets a pickle without running it (docs/security.md).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from ttt import safe_pickle
    from ttt.errors import TttError

    try:
        safe_pickle.load(a.pkl)
    except TttError as e:
        parity.fail(f"restore_check: {e}")
    repo = a.ogbench if case["reference"]["repository"].startswith("seohongpark/ogbench") else a.authors
    module = Path(case["reference"]["file"]).stem
    agent_mod, flax_utils = parity.import_reference(repo.resolve(), module)
    config = parity.config_from_json(agent_mod, case["config"])
    agent = parity.create_agent(agent_mod, config, case["agent_seed"], case["obs_dim"], case["action_dim"])

    if not a.lenient:
        import flax

        try:
            with open(a.pkl, "rb") as f:
                state = pickle.load(f)
            got = parity.flatten_state(state["agent"])
        except Exception as e:  # noqa: BLE001 - any unreadable pickle is one failure line
            parity.fail(f"restore_check: cannot unpickle {a.pkl}: {type(e).__name__}: {e}")
        expected = parity.flatten_state(flax.serialization.to_state_dict(agent))
        problems = structure_problems(expected, got)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            parity.fail(f"restore_check: {a.pkl} does not fit the reference {case['agent_class']}: {problems[0]}{more}")

    epoch = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(a.pkl.resolve(), Path(tmp) / f"params_{epoch}.pkl")
        try:
            agent = flax_utils.restore_agent(agent, tmp, epoch)
        except Exception as e:  # noqa: BLE001 - their restore's own error, on one line
            msg = " ".join(str(e).split())
            parity.fail(f"restore_check: the reference's restore_agent failed: {type(e).__name__}: {msg}")
    try:
        out = parity.eval_forwards(agent, module, data["eval_observations"], data["eval_goals"],
                                   data["eval_q_actions"], config)  # fmt: skip
    except Exception as e:  # noqa: BLE001 - e.g. a shape that only fails in the forward under --lenient
        msg = " ".join(str(e).split())[:300]
        parity.fail(f"restore_check: the restored agent's forward failed: {type(e).__name__}: {msg}")
    np.savez(a.out, **{f"eval_{k}": v for k, v in out.items()})
    for k, v in out.items():
        diffs = [f"{tag} {float(np.abs(v - data[f'eval_{k}_{tag}']).max()):.3g}" for tag in ("init", "final")]
        print(f"eval_{k} {v.shape}: max |diff| vs fixture " + ", ".join(diffs))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
