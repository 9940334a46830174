"""Test-time fine-tuning: N steps of the backbone's whole loss on the selected rows, as one `lax.scan`.

`make_finetune(...)` returns the pure `finetune(agent, opt_state, key, data, weights, goal) -> (agent, metrics)`.
Each step draws a batch of rows from the selection's training weights (`sample_ttt_rows`: a `mix` fraction
uniformly from the dataset), builds the backbone's own batch for them (value goals relabelled as in
pre-training), fixes the actor goal of the selected rows to the episode's goal `g*`, and applies one Adam step
of the whole loss (critic and actor) followed by the backbone's target update. The optimiser starts fresh every
round unless `reuse_opt_state` (then the caller passes the pre-training Adam state). `train = 'actor'` moves only
the policy networks (`Backbone.actors`); `alpha` replaces the backbone's BC weight during fine-tuning.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int, Key, PRNGKeyArray, Real

from ttt.agents.common import Backbone, step_targets
from ttt.data.dataset import Dataset
from ttt.data.sampler import SamplerConfig, sample_rows
from ttt.hparams import HParams, n_uniform


class WeightTable(eqx.Module):
    """The cumulative training weights of one round (`weight_table`), built once and sampled N times."""

    cum: Array  # cumulative weights (int32 for integer weights, float32 otherwise)
    total: Array  # the sum of the weights
    last: Int[Array, ""]  # the last row with a positive weight (float round-up must not leave the support)


def weight_table(weights: Real[Array, " rows"]) -> WeightTable:
    """One O(|D|) cumulative sum of the round's weights, shared by all its batch draws."""
    if jnp.issubdtype(weights.dtype, jnp.integer):
        c = jnp.cumsum(weights.astype(jnp.int32))
        last = jnp.asarray(weights.shape[0] - 1, jnp.int32)
    else:
        w = jnp.maximum(weights.astype(jnp.float32), 0.0)
        c = jnp.cumsum(w)
        last = jnp.max(jnp.where(w > 0, jnp.arange(w.shape[0]), 0)).astype(jnp.int32)
    return WeightTable(cum=c, total=c[-1], last=last)


def _sample_weighted(key: Key[Array, ""], table: WeightTable, n: int) -> tuple[Int[Array, " n"], Array]:
    """`n` rows with probability proportional to the weights (searchsorted on their cumulative sum), and the
    total weight."""
    c, total = table.cum, table.total
    if jnp.issubdtype(c.dtype, jnp.integer):
        u = jax.random.randint(key, (n,), 0, jnp.maximum(total, 1))
        idx = jnp.searchsorted(c, u, side="right")
    else:
        idx = jnp.searchsorted(c, jax.random.uniform(key, (n,)) * total, side="right")
        idx = jnp.minimum(idx, table.last)
    return jnp.minimum(idx, c.shape[0] - 1).astype(jnp.int32), total


def sample_ttt_rows(
    key: Key[Array, ""],
    weights: Real[Array, " rows"] | WeightTable,
    n: int,
    mix: float,
    data: Dataset,
    n_mix: Int[Array, ""] | None = None,
) -> Int[Array, " n"]:
    """`n` TTT training rows: the first `n - round(mix * n)` drawn from `weights` (or their `weight_table`, to
    draw many batches from one cumulative sum), the rest uniformly from the valid rows. With all-zero weights
    (empty selection) the weighted part falls back to uniform valid rows. `n_mix` (traced, e.g.
    `HParams.n_mix`) overrides `round(mix * n)`: then `n` rows are drawn from each source and the first `n - n_mix`
    weighted ones kept, the same rows as the static split (JAX's draws are prefix-consistent)."""
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"sample_ttt_rows: n must be an int >= 1, got {n!r}")
    if not (isinstance(mix, int | float) and not isinstance(mix, bool) and 0.0 <= mix <= 1.0):
        raise ValueError(f"sample_ttt_rows: mix must be in [0, 1], got {mix!r}")
    table = weights if isinstance(weights, WeightTable) else weight_table(weights)
    k_w, k_fallback, k_mix = jax.random.split(key, 3)
    if n_mix is not None:
        weighted, total = _sample_weighted(k_w, table, n)
        weighted = jnp.where(total > 0, weighted, sample_rows(k_fallback, data, n))
        uniform = sample_rows(k_mix, data, n)
        pos = jnp.arange(n)
        n_w = n - n_mix
        return jnp.where(pos < n_w, weighted, uniform[jnp.maximum(pos - n_w, 0)]).astype(jnp.int32)
    n_mix = n_uniform(n, mix)
    n_w = n - n_mix
    parts = []
    if n_w > 0:
        weighted, total = _sample_weighted(k_w, table, n_w)
        parts.append(jnp.where(total > 0, weighted, sample_rows(k_fallback, data, n_w)))
    if n_mix > 0:
        parts.append(sample_rows(k_mix, data, n_mix))
    return jnp.concatenate(parts).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """Static fine-tuning settings.

    - `steps`: N gradient steps per round (>= 0; 0 keeps the pre-trained agent).
    - `lr`: Adam learning rate (paper: 3e-4 or 3e-5, tuned per environment).
    - `batch_size`: rows per step; None: the pre-training batch size.
    - `reuse_opt_state`: start each round from the pre-training Adam state instead of a fresh one.
    - `full_loss`: optimise every term of the backbone's loss even where the backbone declares some cannot change
      an action (GC-BC's selection-only critic, `Backbone.ttt_config`); the actor comes out identical, slower.
    - `train`: which networks fine-tuning moves: 'all' (every network the loss differentiates: value, critic and
      actor, as the published code does) or 'actor' (only the policy networks, `Backbone.actors`: the critic and
      value stay the pre-trained ones, so the actor's gradient follows the pre-trained critic).
    - `alpha`: the BC weight of the backbone's actor loss during fine-tuning (DDPG+BC's alpha, AWR's temperature:
      the config field `alpha`); None keeps the pre-training one. Only for backbones whose config has `alpha`.
    """

    steps: int = 100
    lr: float = 3e-4
    batch_size: int | None = None
    reuse_opt_state: bool = False
    full_loss: bool = False
    train: str = "all"
    alpha: float | None = None

    def __post_init__(self):
        if not (isinstance(self.steps, int) and not isinstance(self.steps, bool) and self.steps >= 0):
            raise ValueError(f"finetune steps N must be an int >= 0, got {self.steps!r}")
        if not (isinstance(self.lr, int | float) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"finetune lr must be a number > 0, got {self.lr!r}")
        if self.batch_size is not None and not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ValueError(
                f"finetune batch_size must be an int >= 1 (or None for the pre-training one), got {self.batch_size!r}"
            )
        if self.train not in TRAIN_PARTS:
            raise ValueError(f"finetune train must be one of {', '.join(TRAIN_PARTS)}, got {self.train!r}")
        if self.alpha is not None and not (
            isinstance(self.alpha, int | float) and not isinstance(self.alpha, bool) and math.isfinite(self.alpha)
            and self.alpha >= 0
        ):
            raise ValueError(
                f"finetune alpha must be a number >= 0 (or None for the pre-training one), got {self.alpha!r}"
            )


TRAIN_PARTS = ("all", "actor")


def finetune_backbone_config(backbone: Backbone, cfg, ft: FinetuneConfig):
    """The backbone config whose loss fine-tuning optimises: `Backbone.ttt_config` (unless `full_loss`) with `alpha`
    replaced by `ft.alpha`. Raises ValueError where `ft.alpha` is set but the backbone has no `alpha`."""
    cfg = cfg if ft.full_loss else backbone.ttt_config(cfg)
    if ft.alpha is not None:
        if not any(f.name == "alpha" for f in dataclasses.fields(cfg)):
            raise ValueError(f"ft_alpha (fine-tuning's BC weight alpha) applies to a DDPG+BC or AWR actor loss; "
                             f"{backbone.name} has none (valid for gciql, gciql-awr, qrl)")  # fmt: skip
        cfg = dataclasses.replace(cfg, alpha=float(ft.alpha))
    return cfg


def make_optimizer(ft: FinetuneConfig) -> optax.GradientTransformation:
    return optax.adam(ft.lr)


@dataclasses.dataclass(frozen=True)
class TTTStep:
    """The two halves of one test-time update, as pure functions (what `finetune` scans N times; benchmarks and
    host loops call them one at a time).

    - `init(agent) -> opt_state`: a fresh Adam state.
    - `table(weights) -> WeightTable`: the round's cumulative weights (one O(|D|) pass per round).
    - `draw(k_rows, k_goals, data, table, goal, n_mix=None) -> batch`: rows drawn (with `k_rows`) from the
      selection's weights table (a `mix` fraction uniformly; `n_mix`, traced, overrides its row count), the
      backbone's batch for them (goals relabelled with `k_goals`), actor goal `g*` (a goal OBSERVATION) on the
      selected rows.
    - `update(agent, opt_state, batch, key, lr=None) -> (agent, opt_state, loss)`: one Adam step of the loss (at
      `lr`, traced, else the config's) and the backbone's target update (none with `train = 'actor'`).
      Adam covers only the arrays the loss differentiates (`Backbone.frozen` names the
      rest: target networks, GC-BC's selection-only critic); their updates would be exactly zero.
    - `restrict(agent, opt_state) -> opt_state`: a pre-training Adam state cut to those arrays
      (`reuse_opt_state`).
    """

    init: Callable
    table: Callable
    draw: Callable
    update: Callable
    restrict: Callable


def make_ttt_step(backbone: Backbone, cfg, sampler: SamplerConfig, ft: FinetuneConfig, mix: float = 0.0) -> TTTStep:
    """`TTTStep` for one backbone configuration (see `make_finetune` for `mix` and the loss used)."""
    cfg = finetune_backbone_config(backbone, cfg, ft)
    opt = make_optimizer(ft)
    n = ft.batch_size or sampler.batch_size
    sampler = dataclasses.replace(sampler, batch_size=n)
    n_goal_rows = n - n_uniform(n, mix)  # the first rows come from the selection and get g* as actor goal

    frozen_names = backbone.frozen(cfg)

    def trainable(agent):
        """Filter spec: True on the arrays `loss(cfg)` differentiates (not the backbone's `frozen` fields; with
        `train = 'actor'` only the `Backbone.actors` fields)."""
        spec = jax.tree.map(eqx.is_array, agent)
        names = set(frozen_names)
        if ft.train == "actor":
            names |= {f.name for f in dataclasses.fields(agent)
                      if f.name not in backbone.actors and not f.metadata.get("static", False)}  # fmt: skip
        for name in sorted(names):
            if getattr(agent, name, None) is not None:
                spec = eqx.tree_at(lambda s, name=name: getattr(s, name), spec,
                                   jax.tree.map(lambda _: False, getattr(spec, name)))  # fmt: skip
        return spec

    def init(agent):
        return opt.init(eqx.filter(agent, trainable(agent)))

    def draw(k_rows: PRNGKeyArray, k_goals: PRNGKeyArray, data: Dataset, table, goal, n_mix=None):
        idxs = sample_ttt_rows(k_rows, table, n, mix, data, n_mix)
        batch = backbone.batch_fn(k_goals, data, idxs, sampler, cfg)
        n_goal = n_goal_rows if n_mix is None else n - n_mix
        return backbone.with_actor_goal(batch, goal, jnp.arange(n) < n_goal)

    def update(agent, opt_state, batch, key: PRNGKeyArray, lr=None):
        train, rest = eqx.partition(agent, trainable(agent))
        loss_of = lambda train: backbone.loss(eqx.combine(train, rest), batch, key, cfg)  # noqa: E731
        (loss, _), grads = eqx.filter_value_and_grad(loss_of, has_aux=True)(train)
        o = opt if lr is None else optax.adam(lr)  # a traced lr: the same Adam (its state does not hold lr)
        updates, opt_state = o.update(grads, opt_state, train)
        stepped = eqx.combine(eqx.apply_updates(train, updates), rest)
        if ft.train == "all":  # with `train = 'actor'` the critic is fixed, and so is its target
            stepped = step_targets(backbone, cfg, agent, stepped)  # from the pre-step critic, as OGBench
        return stepped, opt_state, loss

    def restrict(agent, opt_state):
        """A pre-training Adam state (over every array of the agent) cut to the trainable arrays: the moments of
        the frozen fields are dropped (they are zero: those fields never had a gradient)."""
        spec = trainable(agent)
        full = jax.tree.structure(eqx.filter(agent, eqx.is_array))

        def cut(x):
            return eqx.filter(x, spec) if jax.tree.structure(x) == full else x

        return jax.tree.map(cut, opt_state, is_leaf=lambda x: jax.tree.structure(x) == full)

    return TTTStep(init, weight_table, draw, update, restrict)


def make_finetune(backbone: Backbone, cfg, sampler: SamplerConfig, ft: FinetuneConfig, mix: float = 0.0):
    """The pure N-step fine-tuning function for one backbone configuration.

    `mix` (`SelectConfig.mix`): the fraction of each batch drawn uniformly from the whole dataset (appendix, QRL:
    0.5); those rows keep their pre-training goal relabelling, the others get `g*` as actor goal.
    `finetune(agent, opt_state, key, data, weights, goal, params=None) -> (agent, metrics)`: `weights[j]` are the
    selection's per-row training weights (all zero: rows drawn uniformly, the caller discards the result); `goal` is
    the goal OBSERVATION g*; `opt_state` is used only with `reuse_opt_state` (pass None otherwise); `params`
    (`ttt.hparams.HParams`, traced) replaces the config's `lr` and `mix`. Metrics: the loss at the first and last step.
    Each step is `TTTStep.draw` then `TTTStep.update` (`make_ttt_step`).
    """
    ts = make_ttt_step(backbone, cfg, sampler, ft, mix)

    def finetune(
        agent,
        opt_state,
        key: PRNGKeyArray,
        data: Dataset,
        weights: Real[Array, " rows"],
        goal: Float[Array, " obs"],
        params: HParams | None = None,
    ):
        if ft.steps == 0:
            nan = jnp.full((), jnp.nan, jnp.float32)
            return agent, {"loss_first": nan, "loss_last": nan}
        state0 = ts.restrict(agent, opt_state) if ft.reuse_opt_state else ts.init(agent)
        table = ts.table(weights)  # once per round, not per step

        def step(carry, i):
            agent, state = carry
            k_rows, k_goals, k_loss = jax.random.split(jax.random.fold_in(key, i), 3)
            n_mix, lr = (None, None) if params is None else (params.n_mix, params.lr)
            batch = ts.draw(k_rows, k_goals, data, table, goal, n_mix)
            agent, state, loss = ts.update(agent, state, batch, k_loss, lr)
            return (agent, state), loss

        (agent, _), losses = jax.lax.scan(step, (agent, state0), jnp.arange(ft.steps))
        return agent, {"loss_first": losses[0], "loss_last": losses[-1]}

    return finetune
