"""Checks at the public boundary. What a user hands to `ttt` (agents, a dataset, task ids, a start and a goal, a
transform of their own) is checked where it enters, before anything compiles, and a mistake raises `TttError` naming
the argument, what was received and what is valid: never a raw JAX shape error from deep inside a program, never a
silent broadcast. Shapes are static under `jit`, so the checks cost nothing at run time."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt import select as sel
from ttt.agents.common import Backbone
from ttt.errors import TttError
from ttt.select import GoalTables, Selection


def check_vector(name: str, x: Any, size: int, what: str) -> jax.Array:
    """`x` as a float array of shape exactly `(size,)`; `what` says what it holds (e.g. 'goal coordinates (xy)')."""
    shape = np.shape(x)
    if shape != (size,):
        raise TttError(f"{name} must be {what} of shape ({size},), got shape {shape}; pass one vector (no batch axis: "
                       "vmap for a batch)")  # fmt: skip
    return jnp.asarray(x, jnp.float32)


def check_tasks(tasks: Any, num_tasks: int, env_id: str) -> tuple[int, ...]:
    """`tasks` as a tuple of distinct task ids in `1..num_tasks` (OGBench numbers its evaluation tasks from 1)."""
    try:
        ids = tuple(int(t) for t in tasks)
        exact = all(not isinstance(t, bool) and int(t) == t for t in tasks)
    except (TypeError, ValueError, OverflowError):
        raise TttError(f"tasks must be a sequence of task ids in 1..{num_tasks}, got {tasks!r}") from None
    if not exact:
        raise TttError(f"tasks must be whole task ids in 1..{num_tasks}, got {tasks!r}")
    if not ids:
        raise TttError(f"tasks must hold at least one task id in 1..{num_tasks}, got {tasks!r}")
    bad = [t for t in ids if not 1 <= t <= num_tasks]
    if bad:
        raise TttError(f"tasks: task {bad[0]} does not exist in {env_id}; valid: 1..{num_tasks} (got {ids})")
    if len(set(ids)) != len(ids):
        raise TttError(f"tasks must be distinct task ids in 1..{num_tasks}, got {ids}")
    return ids


def _describe(tree) -> str:
    return f"{type(tree).__module__}.{type(tree).__qualname__}"


def check_agents(agents, backbone: Backbone, cfg, obs_dim: int, action_dim: int, *, stacked: bool = True) -> int:
    """That `agents` are agents of `backbone` under `cfg` for `obs_dim` observations and `action_dim` actions (the
    same networks, leaf for leaf), seed-stacked on a leading axis when `stacked`; returns the number of seeds."""
    like = eqx.filter_eval_shape(backbone.init, jax.random.key(0), obs_dim, action_dim, cfg)
    name = backbone.name
    if type(agents) is not type(like):
        raise TttError(f"agents: got {_describe(agents)}, but the setup's backbone is {name} ({_describe(like)}); "
                       "evaluate agents with the setup of their checkpoint (ttt.load_run returns both)")  # fmt: skip
    got = [x for x in jax.tree.leaves(agents) if eqx.is_array(x)]
    want = [x for x in jax.tree.leaves(like) if isinstance(x, jax.ShapeDtypeStruct)]  # eval_shape's arrays
    if len(got) != len(want):
        raise TttError(f"agents: their networks do not match the setup's {name} config ({len(got)} arrays, the "
                       f"config makes {len(want)}); use the config they were trained with")  # fmt: skip
    lead = {np.shape(g)[0] if np.ndim(g) else None for g in got} if stacked else {None}
    for g, w in zip(got, want, strict=True):
        shape = np.shape(g)[1:] if stacked else np.shape(g)
        if shape != w.shape:
            sizes = f"observations of {obs_dim} and actions of {action_dim}"
            raise TttError(f"agents: an array of shape {shape}{' per seed' if stacked else ''} where the setup's "
                           f"{name} config with {sizes} makes {w.shape}: these agents were trained for another "
                           "dataset or config")  # fmt: skip
    if stacked and len(lead) != 1:
        raise TttError(f"agents must be seed-stacked: every array with one leading (seed) axis, got {sorted(lead)}")
    return next(iter(lead)) if stacked else 1


def _one_argument(fn: Callable) -> bool:
    """Whether `fn` takes one required positional argument (a `ttt.select.Context`); a signature that cannot be
    read is taken as written for the context."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.kind in positional and p.default is inspect.Parameter.empty) == 1


@dataclasses.dataclass(frozen=True)
class CheckedTransform:
    """A user's selection transform (`ttt.select.Transforms` slot `slot`, a function of one `Context`) whose return
    value is checked when it is traced. Equal to another wrapping of the same function, so equal setups still share
    compiled programs."""

    slot: str
    fn: Callable

    def __call__(self, ctx):
        out = self.fn(ctx)
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        where = f"transform {self.slot} ({name}) returned"
        if self.slot == "precompute":
            if not isinstance(out, GoalTables):
                raise TttError(f"{where} {_describe(out)}; it must return a ttt.select.GoalTables (e.g. "
                               "select.precompute(...) with fields replaced)")  # fmt: skip
            return out
        if self.slot == "select":
            if not isinstance(out, Selection):
                raise TttError(f"{where} {_describe(out)}; it must return a ttt.select.Selection (mask, threshold), "
                               "e.g. Selection(mask, threshold), not a bare mask")  # fmt: skip
            return out
        rows = ctx.data.observations.shape[0]
        kind, ok = ("bool", jnp.bool_) if self.slot == "relevance" else ("integer", jnp.integer)
        if not (hasattr(out, "shape") and hasattr(out, "dtype")) or out.shape != (rows,):
            raise TttError(f"{where} {_describe(out)} of shape {getattr(out, 'shape', None)}; it must return a {kind} "
                           f"array of shape ({rows},), one entry per dataset row")  # fmt: skip
        if not jnp.issubdtype(out.dtype, ok):
            raise TttError(f"{where} an array of dtype {out.dtype}; it must return a {kind} array of shape ({rows},)")
        return out


def check_transforms(transforms, select_cfg=None):
    """`transforms` (a `ttt.select.Transforms`) with every slot a function of the `ttt.select.Context`: the library's
    own as they are, a user's wrapped in a `CheckedTransform` (so that a wrong return type is named when the program
    is traced). A function of more than one positional argument is refused, naming it. With `select_cfg` (the
    `SelectConfig`), also the one rule on swapping stages: a `select` or `weights` of your own refines rule 'paper'
    (the top-q filter) and would be ignored by the episode rules (`ttt.select.RULES`: not `refinable`), so it needs
    rule 'paper'."""
    wrap = {}
    for slot, default in sel.CONTEXT_DEFAULTS.items():
        fn = getattr(transforms, slot)
        if fn is default or isinstance(fn, CheckedTransform):
            continue
        if not _one_argument(fn):
            name = getattr(fn, "__qualname__", repr(fn))
            raise TttError(f"transform {slot} ({name}) must be a function of one ttt.select.Context (ctx.tables, "
                           "ctx.state_xy, ctx.params, ...; docs/extending.md); the positional form of the "
                           "library's own functions is not a transform")  # fmt: skip
        wrap[slot] = CheckedTransform(slot, fn)
    checked = dataclasses.replace(transforms, **wrap)
    if select_cfg is not None and not sel.RULES[select_cfg.rule_used].refinable:
        custom = [slot for slot in ("select", "weights") if getattr(checked, slot) is not sel.CONTEXT_DEFAULTS[slot]]
        if custom:
            why = "" if select_cfg.rule is not None else " (the default of this mode)"
            raise TttError(f"transforms.{custom[0]}: a {custom[0]} transform of your own applies to rule 'paper' only, "
                           f"but this setup's rule is {select_cfg.rule_used!r}{why}; pass rule='paper'")  # fmt: skip
    return checked
