"""The settings of GC-TTT that are numbers, as a traced pytree: `HParams`.

Settings that fix shapes or the program's structure (K, N, the batch size, widths, the rule, `h_min`,
`n_episodes`) are static: they live in `TTTConfig` and a change compiles a new program. The numbers below are
arguments of the compiled episode instead, one value per episode, so a sweep over them vmaps (`evaluate(...,
grid=...)`) and changing them never recompiles:

| name | meaning | static default from |
|---|---|---|
| `lr` | fine-tuning learning rate | `FinetuneConfig.lr` |
| `q` | fraction of relevant sub-trajectories kept (rule mc-episodes: the episode quantile) | `SelectConfig.q` |
| `eps` | relevance radius (`d(s, s_j) < eps`) | `SelectConfig.eps_rel`, else the env's goal threshold |
| `mix` | fraction of each TTT batch drawn uniformly from the dataset (critic-free rows) | `SelectConfig.mix` |
| `noise_alpha` | value-noise scale alpha (rule paper) | `SelectConfig.noise_alpha` |
| `temperature` | action noise: the actor's std scale when acting (0: the mean action) | 0 |
| your own | any number a transform of yours reads as `ctx.params.user[name]` | `Transforms(params=...)` |

`make_hparams` builds them on the host from a `TTTConfig` and overrides, checks each value and resolves what the
program needs exactly (q as a fraction of integers, so `ceil(q * n)` is exact; `mix` as a row count).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ttt.errors import TttError
from ttt.settings import SETTINGS

TRACED = ("lr", "q", "eps", "mix", "noise_alpha", "temperature")
Q_MAX_DENOMINATOR = 10_000


class HParams(eqx.Module):
    """One episode's traced settings (scalars; a batch of episodes has a leading axis on every leaf).

    `q_num / q_den` is `q` as its nearest fraction with denominator <= 10,000 and `n_mix` is `round(mix * batch)`,
    the rows of each fine-tuning batch drawn uniformly; `adapt` False runs the pre-trained policy throughout (a base
    row inside a GC-TTT program); `user` holds the parameters of your own transforms by name."""

    lr: Float[Array, ""]
    q: Float[Array, ""]
    q_num: Int[Array, ""]
    q_den: Int[Array, ""]
    eps_rel: Float[Array, ""]
    mix: Float[Array, ""]
    n_mix: Int[Array, ""]
    noise_alpha: Float[Array, ""]
    temperature: Float[Array, ""]
    adapt: Bool[Array, ""]
    user: dict[str, Array]


def q_fraction(q: float) -> tuple[int, int]:
    """`q` as (numerator, denominator), its nearest fraction with denominator <= 10,000."""
    frac = Fraction(q).limit_denominator(Q_MAX_DENOMINATOR)
    return frac.numerator, frac.denominator


def n_uniform(n: int, mix: float) -> int:
    """How many of a TTT batch of `n` rows are drawn uniformly from the dataset: `round(mix * n)`, halves up."""
    return int(math.floor(mix * n + 0.5))


def _number(name: str, value: Any, ok, valid: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TttError(f"{name} must be a number ({valid}), got {value!r}")
    if not (math.isfinite(value) and ok(float(value))):
        raise TttError(f"{name} must be {valid}, got {value!r}")
    return float(value)


# The ranges of the settings that are declared once (`ttt.settings.SETTINGS`), and the action noise's.
CHECKS = {
    **{k: (SETTINGS[k].check, SETTINGS[k].valid) for k in ("lr", "q", "eps", "mix", "noise_alpha")},
    "temperature": (lambda v: v >= 0, ">= 0"),
}


def defaults(ttt, goal_eps: float, user: Mapping[str, float] = ()) -> dict[str, float]:
    """The traced settings a `TTTConfig` (None: base policy) states, by name (`TRACED`), and the user's."""
    declared = {k: float(SETTINGS[k].default) for k in ("lr", "q", "mix", "noise_alpha")}  # the declared defaults
    out = dict(lr=declared["lr"], q=declared["q"], eps=float(goal_eps), mix=declared["mix"],
               noise_alpha=declared["noise_alpha"], temperature=0.0)  # fmt: skip
    if ttt is not None:
        sel = ttt.select
        out.update(lr=float(ttt.finetune.lr), q=float(sel.q), mix=float(sel.mix), noise_alpha=float(sel.noise_alpha),
                   eps=float(goal_eps if sel.eps_rel is None else sel.eps_rel))  # fmt: skip
    return {**out, **dict(user)}


def make_hparams(values: Mapping[str, float], batch: int, adapt: bool = True) -> HParams:
    """`HParams` from named values (every name of `TRACED`, and the user's; each checked) for fine-tuning batches
    of `batch` rows. Concrete arrays: call it on the host (or at trace time with Python numbers)."""
    vals = {}
    for name, value in values.items():
        ok, valid = CHECKS.get(name, (lambda v: True, "finite"))
        vals[name] = _number(name, value, ok, valid)
    num, den = q_fraction(vals["q"])
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    return HParams(
        lr=f32(vals["lr"]),
        q=f32(vals["q"]),
        q_num=i32(num),
        q_den=i32(den),
        eps_rel=f32(vals["eps"]),
        mix=f32(vals["mix"]),
        n_mix=i32(n_uniform(batch, vals["mix"])),
        noise_alpha=f32(vals["noise_alpha"]),
        temperature=f32(vals["temperature"]),
        adapt=jnp.asarray(adapt, bool),
        user={k: f32(v) for k, v in vals.items() if k not in TRACED},
    )


def stack(params: list[HParams]) -> HParams:
    """A batch of `HParams` (a leading axis on every leaf)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *params)


def broadcast(params: HParams, n: int) -> HParams:
    """`params` repeated over a batch of `n`."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), params)
