"""Agents in OGBench's checkpoint format, in and out: `import_checkpoint` and `export_checkpoint`.

OGBench's reference agents (`impls/` of seohongpark/ogbench) and the GC-TTT authors' code built on them save an agent
with `utils/flax_utils.save_agent`: a pickle of `{'agent': flax.serialization.to_state_dict(agent)}`, i.e.
`{'rng', 'network': {'step', 'params', 'opt_state'}}` with `params['modules_<name>']` one entry per network of the
agent's `ModuleDict` (Flax names: `Dense_i` / `LayerNorm_i` inside each MLP, an ensemble's leaves stacked on a
leading axis, a `kernel` stored `(in, out)` as ours) and `opt_state` optax's Adam state `{'0': {'count', 'mu',
'nu'}, '1': {}}` over the same tree.

What is particular to one agent is declared beside it, in its own module (`ttt.agents.gcbc.OGBENCH`, ...: an
`OgbenchLayout` of its networks, where each Flax leaf lives in the `ttt` agent, the config fields its shapes tell,
the reference's `get_config()` defaults; docs/extending.md); this module reads and writes any of them alike.
Import reads the network sizes from the parameter shapes, takes every other setting from `settings` (the
reference's `get_config()` names) over the reference's defaults, and writes an ordinary `ttt` checkpoint; export
writes the pickle the reference's `restore_agent` reads. Import of an export gives back the same arrays bit for
bit. The pickle is read with `ttt.safe_pickle` (nothing in it runs).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ttt import safe_pickle
from ttt.agents import OGBENCH_LAYOUTS, OgbenchLayout
from ttt.agents.ogbench_layout import FlaxTree, get_path, kernel, number_array, widths
from ttt.checkpoint import (
    Checkpoint,
    TrainState,
    check_compatible,
    init_state,
    new_meta,
    open_checkpoint,
    save_checkpoint,
)
from ttt.data.sampler import GoalMix, SamplerConfig
from ttt.data.specs import get_spec
from ttt.errors import TttError
from ttt.presets import AGENTS, agent_backbone, check_config_value
from ttt.safe_files import show
from ttt.storage import file_sha256, writable_dir

AGENTS_SUPPORTED = tuple(OGBENCH_LAYOUTS)
"""`--agent` names: OGBench's gcbc, gciql (DDPG+BC or AWR: `actor_loss`), qrl (IQE), the authors' saw."""

SAMPLER_KEYS = ("value_p_curgoal", "value_p_trajgoal", "value_p_randomgoal", "value_geom_sample", "actor_p_curgoal",
                "actor_p_trajgoal", "actor_p_randomgoal", "actor_geom_sample", "gc_negative")  # fmt: skip
"""OGBench's `GCDataset` settings `settings` may name (defaults: the reference agent's `get_config()`)."""

IGNORED_KEYS = ("agent_name", "dataset_class", "p_aug", "frame_stack", "encoder", "discrete", "share_goal_rep",
                "quasimetric_type")
"""Reference config keys accepted when they hold the value `ttt` supports (checked in `_check_unsupported`)."""

ShapeTree = FlaxTree


# ------------------------------------------------------------------------------------------------ leaf mapping


def _layout(backbone: str) -> OgbenchLayout:
    """The OGBench layout its agent module declares for `backbone`."""
    layout = OGBENCH_LAYOUTS.get(backbone)
    if layout is None:
        raise TttError(f"no OGBench format for backbone {backbone!r}; supported: {', '.join(AGENTS_SUPPORTED)}")
    return layout


def _put(tree: ShapeTree, path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def _leaves(tree: Any) -> dict[tuple[str, ...], Any]:
    """{key path: leaf} of nested dicts (iterative; the safe loader bounds the depth and size)."""
    out, stack = {}, [((), tree)]
    while stack:
        prefix, x = stack.pop()
        if isinstance(x, dict):
            stack.extend(((*prefix, str(k)), v) for k, v in x.items())
        else:
            out[prefix] = x
    return out


def _name(path: tuple[str, ...]) -> str:
    """A key path from the file, escaped and cut for one line."""
    return show("/".join(path))


def _count(x: Any, where: str, name: str) -> int:
    """An update count from the file: an integer (Python's or a 0-d NumPy integer) in [0, 2**31 - 2]."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
        raise TttError(f"{where}: {name} is not an integer ({show(type(x).__name__, 30)})")
    x = int(x)
    if not 0 <= x <= 2**31 - 2:
        raise TttError(f"{where}: {name} = {show(str(x), 30)} is out of range [0, {2**31 - 2}]")
    return x


def to_flax(backbone: str, agent: Any) -> ShapeTree:
    """The `params` tree (nested dicts of NumPy arrays) the reference agent holds for `agent` (one seed)."""
    out: ShapeTree = {}
    for path, where in _layout(backbone).leaves(agent):
        _put(out, path, np.asarray(where(agent)))
    return out


def from_flax(backbone: str, template: Any, params: ShapeTree, where_from: str) -> Any:
    """`template` (a `ttt` agent, or its shape) with every parameter taken from the Flax tree `params`; a missing
    leaf or a shape that differs is one line naming it; a leaf of `params` that nothing takes is refused too."""
    paths = _layout(backbone).leaves(template)
    values = []
    for path, where in paths:
        got = get_path(params, path)
        want = where(template)
        name = _name(path)
        if got is None:
            raise TttError(f"{where_from}: the state dict has no {name} (a {backbone} agent of these sizes has it)")
        got = number_array(got, where_from, name)
        if tuple(got.shape) != tuple(want.shape):
            raise TttError(f"{where_from}: {name} has shape {tuple(got.shape)}, expected {tuple(want.shape)} (the "
                           "networks' sizes disagree)")  # fmt: skip
        values.append(jnp.asarray(got, dtype=want.dtype))
    extra = sorted(set(_leaves(params)) - {p for p, _ in paths})
    if extra:
        raise TttError(f"{where_from}: the state dict holds {_name(extra[0])} ({len(extra)} unexpected leaves), "
                       f"which a {backbone} agent does not have")  # fmt: skip
    return eqx.tree_at(lambda a: [w(a) for _, w in paths], template, values)


# ------------------------------------------------------------------------------------------- sizes from shapes


def _check_continuous(params: ShapeTree, where: str) -> None:
    """What ttt does not import, refused before any size is read: a discrete-action actor (OGBench's
    `GCDiscreteActor`: `logit_net`, no `mean_net`) and a visual encoder (`gc_encoder` / `encoder` modules)."""
    for m in ("modules_actor", "modules_low_actor"):
        actor = params.get(m)
        if isinstance(actor, dict) and "logit_net" in actor:
            raise TttError(f"{where}: {m} is a discrete-action actor (logit_net); discrete=True is not supported: "
                           "ttt imports continuous actions only")  # fmt: skip
    encoders = [p for p in _leaves(params) if any("encoder" in k for k in p)]
    if encoders:
        raise TttError(f"{where}: {_name(encoders[0][:3])} is a visual encoder; encoder is not supported: ttt imports "
                       "state observations only")  # fmt: skip


def infer_sizes(agent: str, params: ShapeTree, where: str) -> dict[str, Any]:
    """The config fields the parameter shapes determine (hidden dims, layer norm, const std, latent size), plus
    `obs_dim` / `action_dim`: the actor's read here, the rest by the agent's layout (`OgbenchLayout.sizes`);
    networks whose widths must agree and do not are one line naming both."""
    actor = params.get("modules_actor")
    if not isinstance(actor, dict) or "actor_net" not in actor:
        raise TttError(f"{where}: modules_actor is not OGBench's GCActor (no actor_net)")
    _check_continuous(params, where)
    actor_dims, actor_in, _ = widths(actor["actor_net"], where, "modules_actor/actor_net")
    action_dim = int(kernel(actor, ("mean_net", "kernel"), where, "modules_actor").shape[-1])
    out: dict[str, Any] = dict(actor_hidden_dims=actor_dims, const_std="log_stds" not in actor, action_dim=action_dim)
    out.update(_layout(agent).sizes(params, where, actor_in, action_dim))
    return out


# ----------------------------------------------------------------------------------------------------- import


@dataclasses.dataclass(frozen=True)
class Source:
    """One reference pickle read: its path, sha256 and state dict parts."""

    path: Path
    sha256: str
    params: ShapeTree
    opt_state: Any
    step: int


def read_reference(path: str | os.PathLike) -> Source:
    """Read an OGBench-format pickle with the restricted unpickler and check its outline."""
    path = Path(path)
    obj = safe_pickle.load(path)
    where = show(str(path), 300)
    agent = obj.get("agent") if isinstance(obj, dict) else None
    if not isinstance(agent, dict):
        keys = f" with keys {_keys(obj)}" if isinstance(obj, dict) else ""
        raise TttError(f"{where}: not an OGBench agent pickle (expected {{'agent': state dict}}, as save_agent "
                       f"writes; got {type(obj).__name__}{keys})")  # fmt: skip
    network = agent.get("network")
    if not isinstance(network, dict) or not isinstance(network.get("params"), dict):
        raise TttError(f"{where}: the agent state dict has no network/params (keys: {_keys(agent)})")
    step = _count(network.get("step", 1), where, "network/step")
    return Source(path, file_sha256(path), network["params"], network.get("opt_state"), step)


def _keys(d: dict) -> str:
    """A dict's keys from a file, escaped, cut to 10 and 300 characters."""
    ks = [show(str(k), 60) for k in list(d)[:10]]
    return show(", ".join(ks) + (f", ... ({len(d)} keys)" if len(d) > 10 else ""), 300)


def _which_agent(modules: set[str]) -> str | None:
    for name, layout in OGBENCH_LAYOUTS.items():
        if modules in (layout.networks, layout.networks - layout.optional):
            return name
    return None


def _check_networks(agent: str, src: Source) -> None:
    modules = {str(k)[len("modules_"):] for k in src.params if str(k).startswith("modules_")}
    nets = _layout(agent).networks
    want = nets - _layout(agent).optional
    if want <= modules <= nets and set(src.params) == {f"modules_{m}" for m in modules}:
        return
    other = _which_agent(modules)
    if other is not None and other != agent:
        raise TttError(f"{show(str(src.path), 300)}: this pickle holds a {other} agent (networks "
                       f"{', '.join(sorted(modules))}), not "
                       f"{agent}; pass --agent {other}")  # fmt: skip
    missing = sorted(want - modules)
    if missing:
        raise TttError(f"{show(str(src.path), 300)}: the state dict lacks network(s) {', '.join(missing)} (a {agent} "
                       f"agent has "
                       f"{', '.join(sorted(nets))})")  # fmt: skip
    extra = sorted(map(str, set(src.params) - {f"modules_{m}" for m in nets}))
    raise TttError(f"{show(str(src.path), 300)}: unexpected entries {_keys(dict.fromkeys(extra))} in params; a {agent} "
                   f"agent has {', '.join(sorted(nets))}")  # fmt: skip


def _check_unsupported(settings: dict[str, Any]) -> None:
    checks = {"discrete": (False, "continuous actions only"), "encoder": (None, "state observations only (no "
              "visual encoder)"), "p_aug": (0.0, "no image augmentation"), "frame_stack": (None, "no frame stacking"),
              "share_goal_rep": (False, "SAW with separate actor and value goal representations only"),
              "quasimetric_type": ("iqe", "QRL with the IQE quasimetric only")}  # fmt: skip
    for k, (ok, what) in checks.items():
        if k in settings and settings[k] not in (ok, None):
            raise TttError(f"{k}={show(repr(settings[k]), 60)} is not supported: ttt imports {what}")


def imported_configs(agent: str, sizes: dict[str, Any], settings: dict[str, Any]) -> tuple[str, Any, SamplerConfig]:
    """(preset name, backbone Config, SamplerConfig) of an imported agent: sizes from the shapes, the rest from
    `settings` over the reference's defaults (the agent's `OgbenchLayout.config`). A setting that contradicts the
    shapes, or that ttt does not know, is one line naming it and what is valid."""
    layout = _layout(agent)
    backbone = agent_backbone(agent)
    fields = {f.name: str(f.type) for f in dataclasses.fields(backbone.Config)}
    settings = dict(settings)
    _check_unsupported(settings)
    for k in IGNORED_KEYS:
        settings.pop(k, None)
    for k, v in layout.dropped.items():
        if settings.get(k, v) == v:
            settings.pop(k, None)
    geom_discount = settings.pop("actor_geom_discount", None)  # the authors' fork: the actor goals' own discount
    if geom_discount is not None and settings.get("actor_geom_sample") and geom_discount != settings.get(
        "discount", layout.config["discount"]
    ):
        raise TttError(f"actor_geom_discount={geom_discount} differs from discount: ttt samples geometric actor goals "
                       "with the discount")  # fmt: skip
    shape_keys = {k for k in sizes if k in fields}
    values: dict[str, Any] = dict(layout.config)
    values.update({k: v for k, v in sizes.items() if k in fields})
    sampler_set = {k: settings.pop(k) for k in list(settings) if k in SAMPLER_KEYS}
    unknown = sorted(set(settings) - set(fields) - {"value_hidden_dims", "low_actor_hidden_dims"})
    if unknown:
        valid = sorted((set(fields) - shape_keys - {"with_critic"}) | set(SAMPLER_KEYS))
        raise TttError(f"unknown setting(s) {', '.join(unknown)} for {agent}; valid: {', '.join(valid)}")
    for k, v in settings.items():
        if k not in fields:
            continue
        v = check_config_value(agent, k, fields[k], v)
        if k in shape_keys and v != values[k]:
            raise TttError(f"setting {k}={v!r} contradicts the checkpoint's parameters, which say {values[k]!r}")
        values[k] = v
    try:
        cfg = backbone.Config(**values)
    except (TypeError, ValueError) as e:
        raise TttError(f"{agent} config: {e}") from None
    preset = layout.preset_of(cfg)
    return preset, cfg, _sampler_config(preset, cfg, sampler_set)


def _sampler_config(preset: str, cfg: Any, sampler_set: dict[str, Any]) -> SamplerConfig:
    """The goal sampling of an imported agent: the settings named (`SAMPLER_KEYS`) over the preset's."""
    p = AGENTS[preset]
    d = dict(value_p_curgoal=p.value_mix.p_cur, value_p_trajgoal=p.value_mix.p_traj,
             value_p_randomgoal=p.value_mix.p_rand, value_geom_sample=p.value_mix.geom, actor_p_curgoal=0.0,
             actor_p_trajgoal=1.0, actor_p_randomgoal=0.0, actor_geom_sample=False,
             gc_negative=p.gc_negative)  # fmt: skip
    d.update(sampler_set)
    try:
        return SamplerConfig(
            batch_size=cfg.batch_size,
            discount=getattr(cfg, "discount", 0.99),
            value=GoalMix(float(d["value_p_curgoal"]), float(d["value_p_trajgoal"]), float(d["value_p_randomgoal"]),
                          bool(d["value_geom_sample"])),
            actor=GoalMix(float(d["actor_p_curgoal"]), float(d["actor_p_trajgoal"]), float(d["actor_p_randomgoal"]),
                          bool(d["actor_geom_sample"])),
            gc_negative=bool(d["gc_negative"]),
        )  # fmt: skip
    except (TypeError, ValueError) as e:
        raise TttError(f"sampler settings: {e}") from None


def _opt_from_flax(backbone: str, template: TrainState, opt: Any, where: str, count_default: int) -> Any:
    """The `ttt` Adam state from the reference's `{'0': {'count', 'mu', 'nu'}, '1': {}}`; a fresh one when the
    pickle holds none."""
    adam = template.opt_state[0]
    if not isinstance(opt, dict) or not isinstance(opt.get("0"), dict) or "mu" not in opt["0"]:
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (adam.mu, adam.nu))
        return (optax.ScaleByAdamState(count=jnp.asarray(0, jnp.int32), mu=zeros[0], nu=zeros[1]), optax.EmptyState())
    mu = from_flax(backbone, adam.mu, opt["0"]["mu"], f"{where} (opt_state mu)")
    nu = from_flax(backbone, adam.nu, opt["0"]["nu"], f"{where} (opt_state nu)")
    count = jnp.asarray(_count(opt["0"].get("count", count_default), where, "opt_state count"), jnp.int32)
    return (optax.ScaleByAdamState(count=count, mu=mu, nu=nu), optax.EmptyState())


@dataclasses.dataclass(frozen=True)
class Imported:
    """One reference agent as a `ttt` `TrainState` (one seed), with its observation and action sizes."""

    state: TrainState
    agent_dims: tuple[int, int]


def reference_states(
    sources: Sequence[Source], agent: str, settings: dict[str, Any]
) -> tuple[str, Any, SamplerConfig, list[Imported]]:
    """(preset name, Config, SamplerConfig, one `Imported` per source): the networks, Adam state and update count
    of each reference pickle in `ttt`'s layout. Sizes come from the shapes and must agree between sources."""
    _check_unsupported(settings)  # unsupported settings first: nothing is inferred from a file ttt cannot import
    for src in sources:
        _check_networks(agent, src)
    sizes = [infer_sizes(agent, s.params, str(s.path)) for s in sources]
    for s, z in zip(sources[1:], sizes[1:], strict=True):
        if z != sizes[0]:
            raise TttError(f"{s.path}: its networks' sizes differ from {sources[0].path}'s; seeds stacked in one "
                           "checkpoint must share one architecture")  # fmt: skip
    obs_dim, action_dim = sizes[0]["obs_dim"], sizes[0]["action_dim"]
    preset, cfg, sampler = imported_configs(agent, sizes[0], settings)
    template = eqx.filter_eval_shape(init_state, jax.random.key(0), agent_backbone(preset), obs_dim, action_dim, cfg)
    out = []
    for src in sources:
        where = str(src.path)
        params = from_flax(agent, template.agent, src.params, where)
        opt = _opt_from_flax(agent, template, src.opt_state, where, max(src.step - 1, 0))
        state = TrainState(params, opt, jnp.asarray(max(src.step - 1, 0), jnp.int32))
        out.append(Imported(state, (obs_dim, action_dim)))
    return preset, cfg, sampler, out


def import_checkpoint(
    pkls: str | os.PathLike | Sequence[str | os.PathLike],
    agent: str,
    dataset: str,
    out: str | os.PathLike,
    settings: dict[str, Any] | None = None,
    data_dir: str | os.PathLike | None = None,
    reference: str = "ogbench",
) -> Checkpoint:
    """Turn OGBench-format agent pickles (one per seed, stacked in order) into a `ttt` checkpoint at `out`.

    `agent`: gcbc, gciql (DDPG+BC or AWR by `settings['actor_loss']`), qrl or saw. Sizes come from the parameter
    shapes; `settings` (the reference's `get_config()` names: alpha, discount, expectile, value_p_curgoal, ...)
    fill the rest over the reference's defaults. The dataset must exist (its content hash goes into the meta, as
    for a checkpoint trained here). Nothing is written unless everything checks; `out` must be new or empty.
    """
    if agent not in AGENTS_SUPPORTED:
        raise TttError(f"unknown agent {agent!r}; ttt imports {', '.join(AGENTS_SUPPORTED)} (GC-IQL's AWR: --agent "
                       "gciql --set actor_loss=awr)")  # fmt: skip
    paths = [pkls] if isinstance(pkls, str | os.PathLike) else list(pkls)
    if not paths:
        raise TttError("give at least one pickle")
    spec = get_spec(dataset)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TttError(f"--out {out} exists and is not an empty directory; give a new one")
    settings = dict(settings or {})
    sources = [read_reference(p) for p in paths]
    preset, cfg, sampler, states = reference_states(sources, agent, settings)
    obs_dim, action_dim = states[0].agent_dims
    if (obs_dim, action_dim) != (spec.ob_dim, spec.action_dim):
        raise TttError(f"{sources[0].path}: the agent takes observations of size {obs_dim} and actions of size "
                       f"{action_dim}, but {dataset} has {spec.ob_dim} and {spec.action_dim}")  # fmt: skip
    states = [s.state for s in states]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)

    from ttt.data.files import load

    data = load(dataset, data_dir)
    meta_probe = dict(obs_dim=obs_dim, action_dim=action_dim, dataset=dataset)
    check_compatible(meta_probe, dataset, data.obs_dim, data.action_dim, str(sources[0].path))
    source = dict(format="ogbench", reference=reference, settings=settings,
                  files=[dict(name=s.path.name, sha256=s.sha256, step=s.step) for s in sources])  # fmt: skip
    meta = new_meta(preset, agent, cfg, sampler, dataset, data, len(sources), 0, "imported", source=source)
    writable_dir(out.parent if not out.exists() else out, "--out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.import-"))
    try:
        save_checkpoint(tmp, stacked, meta)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return open_checkpoint(out)


# ----------------------------------------------------------------------------------------------------- export


def export_checkpoint(checkpoint: str | os.PathLike | Checkpoint, out: str | os.PathLike, seed: int = 0) -> Path:
    """Write seed `seed` of a `ttt` checkpoint as the pickle OGBench's `restore_agent` reads (`params_N.pkl`).

    The state dict holds what the reference agent holds: `rng` (PRNGKey(seed)), `network` with `step` (updates
    done + 1, as the reference counts), `params` and the Adam state. GC-BC's selection critic has no place in
    OGBench's GC-BC and is left out."""
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(checkpoint)
    backbone = ck.backbone.name
    if backbone not in AGENTS_SUPPORTED:
        raise TttError(f"no OGBench format for backbone {backbone!r}; supported: {', '.join(AGENTS_SUPPORTED)}")
    if not 0 <= seed < ck.seeds:
        raise TttError(f"--seed must be in [0, {ck.seeds}) for this checkpoint of {ck.seeds} seed(s), got {seed}")
    states = ck.load()
    one = jax.tree.map(lambda x: x[seed], states)
    agent, adam = one.agent, one.opt_state[0]
    mu, nu = adam.mu, adam.nu
    step = int(np.asarray(one.step))
    state = {
        "rng": np.asarray(jax.random.key_data(jax.random.PRNGKey(seed))).astype(np.uint32),
        "network": {
            "step": np.asarray(step + 1, np.int32),
            "params": to_flax(backbone, agent),
            "opt_state": {
                "0": {"count": np.asarray(adam.count, np.int32), "mu": to_flax(backbone, mu),
                      "nu": to_flax(backbone, nu)},
                "1": {},
            },
        },
    }  # fmt: skip
    from ttt.storage import atomic_write_bytes

    out = Path(out)
    if out.is_dir():
        raise TttError(f"--out {out} is a directory; give the pickle's file name (e.g. params_{step}.pkl)")
    atomic_write_bytes(out, lambda f: pickle.dump({"agent": state}, f, protocol=4))
    return out
