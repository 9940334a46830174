"""The receding-horizon GC-TTT episode as pure functions and as one program (docs/architecture.md, "The one
compiled episode").

Three pure pieces, shared by the compiled episode and the host driver:

- `prepare(agent, data, goal) -> GoalTables`: once per episode, the values `V(s_j | g*)` of every row (chunked
  dataset pass) and `select.precompute` (rewards, ends, returns, eligible starts);
- `adapt(agent0, opt_state0, key, data, tables, obs, goal) -> (agent, metrics, tables)`: one round: relevance, top
  fraction, training weights and N fine-tuning steps from the pre-trained `agent0` (reset is structural: `agent0`
  never changes); an empty selection keeps `agent0`;
- `act(agent, obs, goal, key) -> action`: the mean action.

`make_episodes` composes them with an in-program environment (`ttt.envs.Env`) into one program over a batch of
(seed, task, episode) elements: `episodes(agents0, opt_states0, env, data, reset_keys, ttt_keys, tasks[, oracle])
-> EpisodeOut`, a `lax.scan` over rounds, each round `adapt` (vmapped over the batch) then a `lax.scan` over K
environment steps; `make_episode` is the single-episode view (vmap it). `ttt.evaluate` runs batches, sharded over
devices. With `ttt=None` the same program evaluates the base policy.

Keys: the round `r` uses `fold_in(ttt_key, r)` split into (adapt, act), adapt's into (select, fine-tune); step `i`
of a round acts with `fold_in(k_act, i)`. The host driver uses the same keys, so both paths make the same selections.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ttt import select as _select
from ttt.agents.common import Backbone
from ttt.checks import check_transforms
from ttt.data.dataset import Dataset
from ttt.data.sampler import SamplerConfig
from ttt.data.specs import DatasetSpec
from ttt.errors import TttError
from ttt.finetune import FinetuneConfig, make_finetune
from ttt.graph import TTGSConfig, distance_scale, make_ttgs, plan_metrics
from ttt.hparams import HParams, broadcast, defaults, make_hparams
from ttt.select import Context, GoalTables, SelectConfig, Transforms, round_weights

# The round metrics, declared once: each name with what a round that did not adapt reports (an idle round: nothing
# relevant, nothing kept, nothing trained). Selection's (`ttt.select.span_metrics`), fine-tuning's (`loss_first`,
# `loss_last`) and the lazy value pass's (`value_rows`); `EvalResult.rounds` adds `active`.
_IDLE = {"int": (0, "int32"), "float": (math.nan, "float32"), "true": (True, "bool")}
ROUND_METRICS: dict[str, str] = {
    "n_rel": "int",
    "n_selected": "int",
    "threshold": "float",
    "empty": "true",
    "n_train_rows": "int",
    "reach_frac": "float",
    "max_span": "int",
    "spearman": "float",
    "oracle_end_sel": "float",
    "oracle_end_all": "float",
    "loss_first": "float",
    "loss_last": "float",
    "value_rows": "int",
}
CRITICS = ("learned", "oracle")


@dataclasses.dataclass(frozen=True)
class TTTConfig:
    """Static GC-TTT settings: period `K` (environment steps per round), selection and fine-tuning, and the rows
    per chunk of the once-per-episode dataset value pass (`value_chunk`: memory; on a CPU, chunks of 1024 rows or
    fewer change the last bits of the values, 2048 and more give the default's to the bit: docs/algorithm.md).

    - `critic`: where selection's values `V(s_j | g*)` come from: 'learned' (the backbone's value function) or
      'oracle' (true shortest-path steps through the maze, `ttt.envs.oracle`; point mazes; selection only).
    - `reset_after_horizon`: within a round, act with the pre-trained agent once more steps have run than the
      longest kept span has rows (the published code's option of that name).
    - `bucket`: how many episodes of a batch adapt together. Each round, the batch's still-running episodes are
      moved to the front and adapted `bucket` at a time (a `lax.while_loop` over buckets), so an episode that has
      ended costs no selection or fine-tuning. None: the whole batch adapts in every round until all of it has
      ended (the pre-0.2 behaviour). Results do not depend on it up to float rounding (tested: a vmap of another
      width may round the fine-tuning's last bits differently; on the ant mazes 1000 steps of contact dynamics can
      turn that into different episodes, with the same success rate: docs/algorithm.md, "Where each default
      comes from"); speed does.
    - `value_cap`: the value pass. None or 0: the full pass: `prepare` computes `V(s_j | g*)` of every dataset
      row once per episode. A fraction in (0, 1]: the lazy pass: `prepare` computes none; each round computes the
      values of the rows from each dataset episode's first relevant row to its end that were not computed before
      (the only rows the built-in rules and diagnostics read), packed `ceil(value_cap * rows)` rows (rounded up to
      `value_chunk`) per pass, as many passes as the round needs, and keeps them in the tables for later rounds.
      'auto' (the default): the lazy pass in passes of one `value_chunk` each where it applies (the learned critic,
      a mode that reads values, the default selection transforms), else the full pass. Selections and results
      equal the full pass's exactly (tested); only the work differs (docs/algorithm.md, "The value pass: full or
      lazy"). The learned critic only (the oracle's values are cheap: computed in full). Round metric
      `value_rows`: rows whose values the round computed.
    """

    K: int = 100
    select: SelectConfig = SelectConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    value_chunk: int = 4096
    critic: str = "learned"
    reset_after_horizon: bool = False
    bucket: int | None = 1
    value_cap: float | str | None = "auto"

    def __post_init__(self):
        if not (isinstance(self.K, int) and not isinstance(self.K, bool) and self.K >= 1):
            raise ValueError(f"TTT period K must be an int >= 1, got {self.K!r}")
        if not (isinstance(self.value_chunk, int) and self.value_chunk >= 1):
            raise ValueError(f"value_chunk must be an int >= 1, got {self.value_chunk!r}")
        if self.critic not in CRITICS:
            raise ValueError(f"TTT critic must be one of {', '.join(CRITICS)}, got {self.critic!r}")
        if not isinstance(self.reset_after_horizon, bool):
            raise ValueError(f"reset_after_horizon must be a bool, got {self.reset_after_horizon!r}")
        if self.bucket is not None and not (
            isinstance(self.bucket, int) and not isinstance(self.bucket, bool) and self.bucket >= 1
        ):
            raise ValueError(f"TTT bucket must be an int >= 1 or None (the whole batch), got {self.bucket!r}")
        cap = self.value_cap
        if cap is not None and cap != "auto" and not (
            isinstance(cap, int | float) and not isinstance(cap, bool) and math.isfinite(cap) and 0.0 <= cap <= 1.0
        ):
            raise ValueError(f"value_cap must be a fraction of the rows in [0, 1], 'auto' (the default) or None (the "
                             f"full pass), got {cap!r}")  # fmt: skip



def lazy_pass(ttt: TTTConfig | None, transforms: Transforms = Transforms(), has_value: bool = True) -> bool:
    """The one predicate of whether an episode of `ttt` runs the lazy value pass (`TTTConfig.value_cap`): `value_cap`
    > 0 or 'auto', the learned critic, and a mode that reads values ('critic'; 'fixed' with a backbone that has a
    value function, `has_value`; not 'mc'); with 'auto' only under the default selection transforms (one of your own
    may read rows the pass leaves out)."""
    if ttt is None or not ttt.value_cap or ttt.critic != "learned":
        return False
    if not (ttt.select.mode == "critic" or (ttt.select.mode == "fixed" and has_value)):
        return False
    if ttt.value_cap != "auto":
        return True
    checked = check_transforms(transforms)
    return all(getattr(checked, k) is v for k, v in _select.CONTEXT_DEFAULTS.items())


def value_pass_rows(ttt: TTTConfig, n_rows: int) -> int:
    """Rows of one packed pass of the lazy value pass: `ceil(value_cap * n_rows)` rounded up to a whole number of
    the full pass's chunks (`min(value_chunk, n_rows)` rows), so each chunk has the full pass's shape; with
    'auto' one chunk (a round computes at most one chunk of padding)."""
    chunk = min(ttt.value_chunk, n_rows)
    if ttt.value_cap == "auto":
        return chunk
    return max(1, -(-math.ceil(ttt.value_cap * n_rows) // chunk)) * chunk


def _uncomputed_values(n_rows: int) -> Float[Array, " rows"]:
    """What the lazy cache holds for rows not computed yet (NaN: 'very far'); no rule reads them (tests fill them
    with garbage through this function)."""
    return jnp.full((n_rows,), jnp.nan, jnp.float32)


class EpisodeOut(eqx.Module):
    """One episode: success, steps taken (to success or the limit), the observation after every step (frozen
    once the episode ended), the actions, and per-round selection/fine-tuning metrics (`ROUND_METRICS`)."""

    success: Bool[Array, ""]
    steps: Int[Array, ""]
    start: Float[Array, " obs"]
    goal: Float[Array, " obs"]
    observations: Float[Array, "L obs"]
    actions: Float[Array, "L act"]
    rounds: dict[str, Array]


def n_rounds(max_steps: int, ttt: TTTConfig | None) -> int:
    return 1 if ttt is None else math.ceil(max_steps / ttt.K)


def round_keys(ttt_key: PRNGKeyArray, r: Int[Array, ""] | int) -> tuple[PRNGKeyArray, PRNGKeyArray]:
    """(adapt, act) keys of round `r`; `adapt` splits its key into (select, fine-tune)."""
    k_adapt, k_act = jax.random.split(jax.random.fold_in(ttt_key, r))
    return k_adapt, k_act


def dataset_values(
    value_fn, agent, observations: Float[Array, "rows obs"], goal: Float[Array, " obs"], chunk: int
) -> Float[Array, " rows"]:
    """`value_fn(agent, s_j, goal)` for every row, `chunk` rows at a time (`lax.map`), so memory stays bounded."""
    n, d = observations.shape
    chunk = min(chunk, n)
    pad = (-n) % chunk
    obs = jnp.pad(observations, ((0, pad), (0, 0))).reshape(-1, chunk, d)
    values = jax.lax.map(lambda o: value_fn(agent, o, jnp.broadcast_to(goal, o.shape)), obs)
    return values.reshape(-1)[:n]


def ttt_batch(ttt: TTTConfig, sampler: SamplerConfig) -> int:
    """Rows per fine-tuning batch: the TTT batch size, else the pre-training one."""
    return ttt.finetune.batch_size or sampler.batch_size


def default_hparams(
    ttt: TTTConfig | None, sampler: SamplerConfig, spec: DatasetSpec, transforms: Transforms
) -> HParams:
    """The traced settings the static configs state (`ttt.hparams.defaults`), with the transforms' own parameters."""
    batch = sampler.batch_size if ttt is None else ttt_batch(ttt, sampler)
    return make_hparams(defaults(ttt, spec.goal_eps, dict(transforms.params)), batch)


def make_round_fns(
    backbone: Backbone,
    cfg,
    sampler: SamplerConfig,
    spec: DatasetSpec,
    ttt: TTTConfig,
    transforms: Transforms = Transforms(),
):
    """`(prepare, adapt, act)` for one configuration (see the module docstring); all pure, unjitted, unbatched.
    `transforms` supplies the selection stages (functions of a `ttt.select.Context`).

    - `prepare(agent, data, goal, oracle=None, params=None) -> GoalTables`;
    - `adapt(agent0, opt_state0, key, data, tables, obs, goal, params=None, round=0) -> (agent, metrics, tables)`:
      `tables` after the round (with the lazy value pass, `lazy_pass`, holding the values the round computed: pass
      them to the next round; otherwise the same tables);
    - `act(agent, obs, goal, key=None, temperature=0.0) -> action`.

    `goal` is the goal OBSERVATION (the shape of `obs`); its goal coordinates are `spec.goal_coords(goal)`.
    `params` (`ttt.hparams.HParams`, traced): lr, q, eps, mix, noise_alpha and the transforms' own; None: the
    values the configs state. `params.adapt` False: `adapt` returns `agent0` and idle metrics."""
    sel = ttt.select
    transforms = check_transforms(transforms, sel)  # context functions (a wrong return type: a TttError naming it)
    check_value_function(backbone, cfg, ttt)
    oracle_critic = ttt.critic == "oracle"
    needs_values = sel.mode == "critic" or (sel.mode == "fixed" and (backbone.has_value(cfg) or oracle_critic))
    lazy = lazy_pass(ttt, transforms, backbone.has_value(cfg))
    if lazy and any(getattr(transforms, k) is not v for k, v in _select.CONTEXT_DEFAULTS.items()):
        raise ValueError("value_cap (the lazy value pass) needs the default selection transforms: a transform of "
                         "your own may read values of rows it does not compute; set value_cap=None")  # fmt: skip
    finetune = make_finetune(backbone, cfg, sampler, ttt.finetune, sel.mix)

    def hparams(params):
        return default_hparams(ttt, sampler, spec, transforms) if params is None else params

    def prepare(agent, data: Dataset, goal: Float[Array, " obs"], oracle=None, params=None) -> GoalTables:
        """`oracle` (`ttt.envs.oracle.MazeOracle`, optional): the values with critic='oracle', and the ranking
        diagnostics (`GoalTables.oracle_steps`) with either critic."""
        goal_xy = spec.goal_coords(goal)
        if oracle_critic and oracle is None:
            raise ValueError("critic='oracle' needs the maze oracle (ttt.envs.oracle.maze_oracle): point mazes only")
        values = None
        if needs_values:
            if oracle_critic:
                values = oracle.values(data.goals, goal_xy, sel.gamma)
            elif lazy:  # none computed yet: each round computes the rows it reads (`refresh`)
                values = _uncomputed_values(data.n_rows)
            else:
                values = dataset_values(backbone.value, agent, data.observations, goal, ttt.value_chunk)
        ctx = Context(data=data, goal_eps=spec.goal_eps, cfg=sel, goal_xy=goal_xy, params=hparams(params), goal=goal,
                      values=values)  # fmt: skip
        tables = transforms.precompute(ctx)
        if oracle is not None:
            tables = dataclasses.replace(tables, oracle_steps=oracle.steps(data.goals, goal_xy))
        if lazy:
            tables = dataclasses.replace(tables, values=values, computed=jnp.zeros((data.n_rows,), bool))
        return tables

    def adapt(agent0, opt_state0, key: PRNGKeyArray, data: Dataset, tables: GoalTables, obs, goal, params=None,
              round=0):  # fmt: skip
        params = hparams(params)
        k_sel, k_ft = jax.random.split(key)
        row_values = None
        if sel.relevance == "value":
            row_values = dataset_values(
                lambda a, o, g: backbone.value(a, g, o), agent0, data.observations, obs, ttt.value_chunk
            )  # V(s | s_j): the current state towards every row
        ctx = Context(data=data, goal_eps=spec.goal_eps, cfg=sel, goal_xy=spec.goal_coords(goal), params=params,
                      goal=goal, obs=obs, state_xy=spec.goal_coords(obs), round=jnp.asarray(round, jnp.int32),
                      key=k_sel, row_values=row_values, tables=tables)  # fmt: skip
        value_rows = jnp.int32(0)
        if lazy:
            if tables.computed is None:
                raise ValueError("value_cap: these tables come from a prepare without value_cap (no value cache)")
            # The default relevance reads only tables.eligible, which does not depend on the values.
            rel = transforms.relevance(ctx)
            tables, value_rows = _refresh(backbone, ttt, transforms, agent0, data, tables, rel & params.adapt, goal,
                                          ctx)  # fmt: skip
            ctx = dataclasses.replace(ctx, tables=tables, relevant=rel)  # the round starts from these relevant rows
        weights, metrics = round_weights(ctx, transforms)
        tuned, ft_metrics = finetune(agent0, opt_state0, k_ft, data, weights, goal, params)
        keep0 = metrics["empty"] | ~params.adapt
        ft_metrics = {k: jnp.where(keep0, jnp.nan, v) for k, v in ft_metrics.items()}  # nothing kept: nothing trained
        agent = jax.tree.map(
            lambda a, b: jnp.where(keep0, a, b) if eqx.is_array(a) else a,
            agent0,
            tuned,
        )
        metrics = _where_tree(params.adapt, {**metrics, **ft_metrics, "value_rows": value_rows},
                              _idle_metrics(()))  # fmt: skip
        return agent, metrics, tables

    return prepare, adapt, make_act(backbone)


def _refresh(backbone: Backbone, ttt: TTTConfig, transforms: Transforms, agent0, data: Dataset, tables: GoalTables,
             rel, goal, ctx) -> tuple[GoalTables, Int[Array, ""]]:  # fmt: skip
    """The lazy value pass of one round: the values of the rows from the first relevant row (`rel`) of each
    dataset episode to its end (every row a rule or diagnostic can read: spans start at relevant rows and end
    later in their episode) not computed before, `cap` rows per pass (packed in row order by `nonzero`; a
    `lax.while_loop` over passes), scattered into the cache; then the tables the rule reads, from the cache.
    Returns the tables and the number of rows computed."""
    n, E = data.n_rows, data.n_episodes
    cap = value_pass_rows(ttt, n)
    ep = data.ep_id.astype(jnp.int32)
    rows = jnp.arange(n, dtype=jnp.int32)
    first = jax.ops.segment_min(jnp.where(rel, rows, n), ep, num_segments=E, indices_are_sorted=True)
    row_new = (rows >= first[ep]) & ~tables.computed
    count = jnp.sum(row_new, dtype=jnp.int32)
    order = jnp.nonzero(row_new, size=-(-n // cap) * cap, fill_value=n)[0].astype(jnp.int32)

    def one_pass(c):
        i, values = c
        idx = jax.lax.dynamic_slice(order, (i * cap,), (cap,))  # n: a padded slot (gathers row n-1, dropped)
        v = dataset_values(backbone.value, agent0, data.observations[jnp.minimum(idx, n - 1)], goal,
                           ttt.value_chunk)  # fmt: skip
        return i + 1, values.at[idx].set(v.astype(values.dtype), mode="drop")

    _, values = jax.lax.while_loop(lambda c: c[0] * cap < count, one_pass, (jnp.int32(0), tables.values))
    computed = tables.computed | row_new
    if _select.RULES[ttt.select.rule_used].reads == "steps":  # the rule reads only the predicted steps
        tables = dataclasses.replace(tables, steps=_select.predicted_steps(values, ttt.select.gamma))
    else:  # rule 'paper': ends and returns are within-episode scans of the values
        fresh = transforms.precompute(dataclasses.replace(ctx, values=values, tables=None))
        tables = dataclasses.replace(fresh, oracle_steps=tables.oracle_steps)
    return dataclasses.replace(tables, values=values, computed=computed), count


def check_value_function(backbone: Backbone, cfg, ttt: TTTConfig) -> None:
    """The one rule on a backbone without a value function (GC-BC without its critic, ...): selection by a learned
    critic (mode 'critic', variant 'ttt') and value relevance need one; a `TttError` says what to use instead."""
    if backbone.has_value(cfg):
        return
    if ttt.select.mode == "critic" and ttt.critic != "oracle":
        raise TttError(f"variant ttt needs a value function (its selection ranks by the critic), which this "
                       f"{backbone.name} agent lacks; use ttt-mc")  # fmt: skip
    if ttt.select.relevance == "value":
        raise TttError(f"relevance 'value' needs a value function, which this {backbone.name} agent lacks; use "
                       "relevance 'distance'")  # fmt: skip


def make_act(backbone: Backbone):
    """`act(agent, obs, goal, key=None, temperature=0.0) -> action`: the backbone's action; at temperature 0 (the
    default) its mean action, deterministic, so the key may be left out; `temperature` > 0 scales the actor's std
    (action noise; traced). `goal` is a goal OBSERVATION (the shape of `obs`), not goal coordinates."""

    def act(agent, obs, goal, key: PRNGKeyArray | None = None, temperature=0.0):
        key = jax.random.key(0) if key is None else key  # temperature 0: the key draws nothing that is used
        return backbone.act(agent, obs, goal, key, temperature)

    return act


def empty_round_metrics(batch: int) -> dict[str, Array]:
    """Round metrics of a round that did not adapt (base policy, or every episode of the batch had ended)."""
    return _idle_metrics((batch,))


def _idle_metrics(shape: tuple[int, ...]) -> dict[str, Array]:
    return {name: jnp.full(shape, *_IDLE[kind]) for name, kind in ROUND_METRICS.items()}


def _adapt_live(v_adapt, G: int, done: Bool[Array, " B"], batched, data: Dataset, dyn0, metrics0, cache=None):
    """One round's `adapt` for the still-running episodes only (`done`: ended, or not adapting): their indices are
    moved to the front (a stable sort on `done`) and adapted `G` at a time by a `lax.while_loop` over
    `ceil(live / G)` buckets; each bucket gathers its episodes' inputs, adapts them (`v_adapt`, vmapped over G), and
    scatters the tuned agents and round metrics back. Ended episodes keep `dyn0` (their pre-trained arrays) and
    `metrics0`. Fixed shapes throughout; only the loop's trip count depends on the data. With `cache` (the tables
    of the lazy value pass) each bucket gathers its episodes' tables and scatters the updated ones `v_adapt` returns
    back; returns `(dyn, metrics, cache)`."""
    agents0, opt_states0, k_adapt, tables, obs, goal, params = batched
    lazy = cache is not None
    B = done.shape[0]
    order = jnp.argsort(done, stable=True)  # running episodes first, in batch order
    n_live = jnp.sum(~done).astype(jnp.int32)
    n_buckets = (n_live + G - 1) // G
    take = lambda tree, idx: jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, tree)  # noqa: E731

    def body(carry):
        b, dyn, metrics, cache = carry
        tables_b = cache if lazy else tables
        pos = b * G + jnp.arange(G)
        live = pos < n_live
        idx = order[jnp.minimum(pos, B - 1)]
        agents, m, after = v_adapt(take(agents0, idx), take(opt_states0, idx), k_adapt[idx], data,
                                   take(tables_b, idx), obs[idx], goal[idx], take(params, idx))  # fmt: skip
        put = jnp.where(live, idx, B)  # B: out of range, dropped (a padded slot of the last bucket)
        scatter = lambda full, part: full.at[put].set(part, mode="drop")  # noqa: E731
        dyn = jax.tree.map(scatter, dyn, eqx.filter(agents, eqx.is_array))
        metrics = jax.tree.map(scatter, metrics, m)
        if lazy:
            cache = jax.tree.map(scatter, cache, after)
        return b + 1, dyn, metrics, cache

    init = (jnp.int32(0), dyn0, metrics0, cache)
    _, dyn, metrics, cache = jax.lax.while_loop(lambda c: c[0] < n_buckets, body, init)
    return dyn, metrics, cache


def _where_tree(pred, a, b):
    return jax.tree.map(lambda x, y: jnp.where(pred.reshape(pred.shape + (1,) * (x.ndim - pred.ndim)), x, y), a, b)


@dataclasses.dataclass(frozen=True)
class _Program:
    """The static pieces of one episode program, which its parts read: the round functions (`prepare` and `adapt`
    None without TTT), TTGS's functions (`ttt.graph.make_ttgs`; None without TTGS), and the configuration's shapes
    and switches: K steps a round, R rounds, the lazy value pass, acting with the pre-trained agent past the horizon."""

    prepare: Callable | None
    adapt: Callable | None
    act: Callable
    build: Callable | None
    plan: Callable | None
    subgoal: Callable | None
    after_step: Callable | None
    ttt: TTTConfig | None
    ttgs: TTGSConfig | None
    K: int
    R: int
    max_steps: int
    lazy: bool
    reset_after: bool
    action_dim: int


@dataclasses.dataclass(frozen=True)
class _Batch:
    """What every round of one batch reads and never changes: the pre-trained agents (whole, and split into their
    arrays and the rest), their optimiser states (None or vmapped on `opt_axis`), the environment, the dataset, the
    oracle, each episode's settings, TTT keys and goal, the goal tables prepared at the start, the TTGS graphs, the
    batch size `B` and the bucket size `G`."""

    agents0: Any
    opt_states0: Any
    opt_axis: int | None
    dyn0: Any
    static: Any
    env: Any
    data: Dataset
    oracle: Any
    params: HParams
    ttt_keys: PRNGKeyArray
    goal: Array
    tables: GoalTables | None
    graphs: Any
    B: int
    G: int


def _program(backbone: Backbone, cfg, sampler: SamplerConfig, spec: DatasetSpec, ttt: TTTConfig | None,
             max_steps: int, transforms: Transforms, ttgs: TTGSConfig | None) -> _Program:  # fmt: skip
    lazy = lazy_pass(ttt, transforms, backbone.has_value(cfg))
    if ttt is not None:  # with the lazy value pass the tables are carried from round to round
        prepare, adapt, act = make_round_fns(backbone, cfg, sampler, spec, ttt, transforms)
    else:
        prepare = adapt = None
        act = make_act(backbone)
    _, build, plan, subgoal, after_step = (None,) * 5 if ttgs is None else make_ttgs(backbone, cfg, spec, ttgs)
    return _Program(prepare=prepare, adapt=adapt, act=act, build=build, plan=plan, subgoal=subgoal,
                    after_step=after_step, ttt=ttt, ttgs=ttgs, K=max_steps if ttt is None else ttt.K,
                    R=n_rounds(max_steps, ttt), max_steps=max_steps, lazy=lazy,
                    reset_after=ttt is not None and ttt.reset_after_horizon, action_dim=spec.action_dim)  # fmt: skip


def _prepare_batch(p: _Program, agents0, data: Dataset, goals, oracle, params) -> GoalTables:
    """`prepare` vmapped over the batch: each episode's goal tables for its goal in `goals`."""
    return jax.vmap(p.prepare, in_axes=(0, None, 0, None, 0))(agents0, data, goals, oracle, params)


def _build_graphs(p: _Program, agents0, dyn0, static, data: Dataset, obs, goal):
    """TTGS: one graph per goal, built one episode at a time (`lax.map`, so one n x n distance matrix is held at a
    time), and each episode's path from its start; `(None, None)` without TTGS."""
    if p.build is None:
        return None, None
    scale = distance_scale(p.ttgs, data)  # a property of the dataset: once, not per goal
    graphs = jax.lax.map(lambda a: p.build(eqx.combine(a[0], static), data, a[1], scale), (dyn0, goal))
    return graphs, jax.vmap(p.plan)(agents0, graphs, obs, goal)


class Live(NamedTuple):
    """What each environment step of a batch changes (leading axis B): the environment states, the observations,
    whether each episode has ended, reached its goal, the steps it took, and TTGS's plans (None without TTGS)."""

    state: Any
    obs: Array
    done: Bool[Array, " B"]
    success: Bool[Array, " B"]
    steps: Int[Array, " B"]
    plan: Any


class RoundCarry(NamedTuple):
    """What a round hands the next: the episodes (`Live`) and the lazy value pass's cache (the goal tables with the
    values computed so far; None without the lazy pass)."""

    live: Live
    cache: GoalTables | None


def _round(p: _Program, fx: _Batch, carry: RoundCarry, r):
    """Round `r` of the batch: its keys, its target (`_round_target`), the adapt schedule (`_adapt_round`), then K
    environment steps (`_rollout`). Returns the next `RoundCarry` and the round's (observations, actions) and
    metrics."""
    live, cache = carry
    k_adapt, k_act = jax.vmap(round_keys, in_axes=(0, None))(fx.ttt_keys, r)
    all_done = jnp.all(live.done)
    idle = live.done | ~fx.params.adapt  # ended, or a base row (`params.adapt` False): nothing to adapt
    target, tables, cache = _round_target(p, fx, live.obs, live.plan, cache)
    agents, metrics, cache = _adapt_round(p, fx, r, k_adapt, idle, live.obs, target, tables, cache)
    # An episode that had ended reports an idle round whether or not its batch still ran the round.
    metrics = {**_where_tree(~idle, metrics, empty_round_metrics(fx.B)), "active": ~live.done}
    live, traj = _rollout(p, fx, r, k_act, agents, metrics["max_span"], all_done, live)
    if p.subgoal is not None:
        metrics = {**metrics, **jax.vmap(plan_metrics)(live.plan)}
    return RoundCarry(live, cache), (traj, metrics)


def _round_target(p: _Program, fx: _Batch, obs, plan_r, cache):
    """The round's target and the goal tables its selection reads: the goal, with the tables prepared at the start
    (with the lazy value pass, its cache, carried from round to round); with TTT and TTGS, TTGS's subgoal at the
    round's start, with tables prepared for it each round anew (the lazy pass's cache restarts from them). Returns
    `(target, tables, cache)`."""
    if p.ttt is None or p.subgoal is None:
        return fx.goal, (cache if p.lazy else fx.tables), cache
    target, _ = jax.vmap(p.subgoal)(fx.agents0, fx.graphs, plan_r, obs, fx.goal)
    tables = _prepare_batch(p, fx.agents0, fx.data, target, fx.oracle, fx.params)
    return target, tables, (tables if p.lazy else cache)


def _adapt_round(p: _Program, fx: _Batch, r, k_adapt, idle, obs, target, tables, cache):
    """The round's adapt schedule: each episode's agent for the round, its round metrics and the lazy pass's cache
    after the round (None without the lazy pass). Without TTT the pre-trained agents and idle metrics; with a bucket
    as large as the batch the whole batch adapts together, the round skipped once every episode is `idle`; else the
    running episodes adapt `G` at a time (`_adapt_live`)."""
    B = fx.B
    if p.ttt is None:
        return fx.agents0, empty_round_metrics(B), cache
    v_adapt = jax.vmap(lambda *a: p.adapt(*a, round=r), in_axes=(0, fx.opt_axis, 0, None, 0, 0, 0, 0))
    if fx.G >= B:  # the whole batch adapts together until all of it has ended

        def run(obs, cache):
            agents, metrics, after = v_adapt(fx.agents0, fx.opt_states0, k_adapt, fx.data, tables, obs, target,
                                             fx.params)  # fmt: skip
            return eqx.filter(agents, eqx.is_array), metrics, after if p.lazy else cache

        def skip(obs, cache):
            return fx.dyn0, empty_round_metrics(B), cache

        dyn, metrics, cache = jax.lax.cond(jnp.all(idle), skip, run, obs, cache)
    else:
        batched = (fx.agents0, fx.opt_states0, k_adapt, tables, obs, target, fx.params)
        dyn, metrics, cache = _adapt_live(v_adapt, fx.G, idle, batched, fx.data, fx.dyn0, empty_round_metrics(B),
                                          cache)  # fmt: skip
    return eqx.combine(dyn, fx.static), metrics, cache


def _rollout(p: _Program, fx: _Batch, r, k_act, agents, max_span, all_done, live: Live):
    """The round's K environment steps (a `lax.scan` of `_env_step`), or none once every episode of the batch has
    ended (the observations held, no actions). Returns the episodes after the round and its (K, B, ...)
    observations and actions."""

    def rollout(c: Live):
        return jax.lax.scan(lambda c, i: _env_step(p, fx, r, k_act, agents, max_span, c, i), c, jnp.arange(p.K))

    def idle(c: Live):
        obs = c.obs
        return c, (jnp.broadcast_to(obs, (p.K,) + obs.shape), jnp.zeros((p.K, fx.B, p.action_dim), obs.dtype))

    return jax.lax.cond(all_done, idle, rollout, live)


def _env_step(p: _Program, fx: _Batch, r, k_act, agents, max_span, c: Live, i):
    """Step `i` of round `r`: each episode acts (towards TTGS's subgoal with TTGS; with the pre-trained agent once
    `i` passes the longest kept span `max_span`, with `reset_after_horizon`) and its environment steps; ended
    episodes and steps past `max_steps` change nothing. Returns the episodes after the step and its (observation,
    action)."""
    state, obs, done, success, steps, plan_s = c
    t = r * p.K + i
    active = ~done & (t < p.max_steps)
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(k_act, i)
    target = fx.goal
    if p.subgoal is not None:  # TTGS: act towards the subgoal
        target, new_plan = jax.vmap(p.subgoal)(fx.agents0, fx.graphs, plan_s, obs, fx.goal)
        plan_s = _where_tree(active, new_plan, plan_s)
    a = jax.vmap(p.act)(agents, obs, target, keys, fx.params.temperature)
    if p.reset_after:  # past the longest kept span: the pre-trained agent acts
        a0 = jax.vmap(p.act)(fx.agents0, obs, target, keys, fx.params.temperature)
        a = jnp.where((i > max_span)[:, None], a0, a)
    new_state, new_obs, hit = jax.vmap(fx.env.step)(state, a)
    state = _where_tree(active, new_state, state)
    obs = jnp.where(active[:, None], new_obs, obs)
    success = success | (active & hit)
    steps = steps + active.astype(jnp.int32)
    if p.subgoal is not None:
        live = active & ~hit
        plan_s = jax.vmap(p.after_step)(fx.agents0, fx.graphs, plan_s, obs, fx.goal, target, live)
    done = done | (active & hit) | (t + 1 >= p.max_steps)
    return Live(state, obs, done, success, steps, plan_s), (obs, jnp.where(active[:, None], a, 0.0))


def _episode_out(p: _Program, success, steps, start, goal, traj, metrics) -> EpisodeOut:
    """The batch's `EpisodeOut` from the rounds' outputs: observations and actions (R, K, B, d) -> (B, max_steps,
    d), round metrics (R, B) -> (B, R)."""
    obs_t, act_t = traj
    obs_t = jnp.moveaxis(obs_t.reshape((p.R * p.K,) + obs_t.shape[2:]), 0, 1)[:, : p.max_steps]
    act_t = jnp.moveaxis(act_t.reshape((p.R * p.K,) + act_t.shape[2:]), 0, 1)[:, : p.max_steps]
    return EpisodeOut(
        success=success,
        steps=steps,
        start=start,
        goal=goal,
        observations=obs_t,
        actions=act_t,
        rounds={k: jnp.moveaxis(v, 0, 1) for k, v in metrics.items()},  # (B, R)
    )


def make_episodes(
    backbone: Backbone,
    cfg,
    sampler: SamplerConfig,
    spec: DatasetSpec,
    ttt: TTTConfig | None,
    max_steps: int,
    transforms: Transforms = Transforms(),
    ttgs: TTGSConfig | None = None,
):
    """`episodes(agents0, opt_states0, env, data, reset_keys, ttt_keys, tasks, oracle=None, params=None) ->
    EpisodeOut` for a batch of B episodes (leading axis B on every argument but `env`, `data` and `oracle`;
    `opt_states0` may be None; `oracle`, a `ttt.envs.oracle.MazeOracle`, is needed with critic='oracle' and adds
    the ranking diagnostics to the round metrics; `params`, `ttt.hparams.HParams` with a leading axis B: each
    episode's traced settings (lr, q, eps, mix, noise_alpha, temperature, adapt, your own), None: the configs'
    values for every episode). Pure; jit it. A grid of settings is a batch whose elements differ in `params`.

    One `lax.scan` over `ceil(max_steps / K)` rounds; in each, `adapt` (vmapped over the batch) then a `lax.scan`
    over K environment steps (vmapped `act` and `env.step`). Steps past `max_steps` or after success change
    nothing (OGBench's `terminate_at_goal`). Each round adapts only the episodes still running, `TTTConfig.bucket`
    at a time (`_adapt_live`), and once every episode of the batch has ended later rounds skip their steps too.
    Results per episode do not depend on the batch it ran in. With `ttt=None` the base policy runs.

    With `ttgs` (`ttt.graph.TTGSConfig`), test-time graph search: each episode's graph is built once for its goal
    (`lax.map` over the batch, so one n x n distance matrix is held at a time) from the pre-trained agent, the path
    is planned from the start, and at every step the policy acts towards TTGS's subgoal instead of the goal
    (replanning per `TTGSConfig.replan_factor`); the round metrics gain `ttt.graph.TTGS_METRICS`. With both `ttt`
    and `ttgs` (variant 'ttt+ttgs'), each round's GC-TTT selects and fine-tunes towards TTGS's subgoal at the
    round's start (its tables prepared for that subgoal, each round anew) instead of the final goal.

    The program by role: `_round` runs one round of the batch: its target (`_round_target`: the goal, or TTGS's
    subgoal), the adapt schedule (`_adapt_round`: the whole batch, or buckets of the running episodes, `_adapt_live`)
    and the K-step rollout (`_rollout`, each step `_env_step`); `_episode_out` assembles the result.
    """
    if not (isinstance(max_steps, int) and max_steps >= 1):
        raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
    if ttt is not None and ttt.K > max_steps:
        raise ValueError(f"TTT period K must be in [1, {max_steps}] (the episode length), got {ttt.K}")
    p = _program(backbone, cfg, sampler, spec, ttt, max_steps, transforms, ttgs)

    def episodes(agents0, opt_states0, env, data: Dataset, reset_keys, ttt_keys, tasks, oracle=None,
                 params=None) -> EpisodeOut:  # fmt: skip
        B = tasks.shape[0]
        if params is None:
            params = broadcast(default_hparams(ttt, sampler, spec, transforms), B)
        state, obs, goal = jax.vmap(env.reset)(reset_keys, tasks)
        tables = None if ttt is None else _prepare_batch(p, agents0, data, goal, oracle, params)
        dyn0, static = eqx.partition(agents0, eqx.is_array)
        graphs, plan0 = _build_graphs(p, agents0, dyn0, static, data, obs, goal)
        G = B if ttt is None or ttt.bucket is None else min(ttt.bucket, B)
        fx = _Batch(agents0=agents0, opt_states0=opt_states0, opt_axis=None if opt_states0 is None else 0, dyn0=dyn0,
                    static=static, env=env, data=data, oracle=oracle, params=params, ttt_keys=ttt_keys, goal=goal,
                    tables=tables, graphs=graphs, B=B, G=G)  # fmt: skip
        live = Live(state, obs, jnp.zeros((B,), bool), jnp.zeros((B,), bool), jnp.zeros((B,), jnp.int32), plan0)
        rounds = functools.partial(_round, p, fx)
        end, (traj, metrics) = jax.lax.scan(rounds, RoundCarry(live, tables if p.lazy else None), jnp.arange(p.R))
        return _episode_out(p, end.live.success, end.live.steps, obs, goal, traj, metrics)

    return episodes


def make_episode(
    backbone: Backbone,
    cfg,
    sampler: SamplerConfig,
    spec: DatasetSpec,
    ttt: TTTConfig | None,
    max_steps: int,
    transforms: Transforms = Transforms(),
    ttgs: TTGSConfig | None = None,
):
    """`episode(agent0, opt_state0, env, data, reset_key, ttt_key, task) -> EpisodeOut`: one episode (the batched
    program with a batch of one); `jax.vmap` it over (seed, task, episode) or call `make_episodes` directly."""
    episodes = make_episodes(backbone, cfg, sampler, spec, ttt, max_steps, transforms, ttgs)

    def episode(agent0, opt_state0, env, data: Dataset, reset_key, ttt_key, task, oracle=None,
                params=None) -> EpisodeOut:  # fmt: skip
        add = lambda tree: jax.tree.map(lambda x: x[None] if eqx.is_array(x) else x, tree)  # noqa: E731
        out = episodes(add(agent0), add(opt_state0), env, data, add(reset_key), add(ttt_key), jnp.asarray(task)[None],
                       oracle, add(params))  # fmt: skip
        return jax.tree.map(lambda x: x[0], out)

    return episode
