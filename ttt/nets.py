"""Networks for the backbones: MLPs, the Gaussian actor, goal-conditioned value ensembles and the IQE head.

Every module is an Equinox module built from a typed key; parameters are array leaves and static fields
hold only shapes and flags. Modules act on any number of leading batch axes (``*batch``), so a single
row and a batch of rows go through the same code. Initialisation and architecture follow OGBench
(``impls/utils/networks.py``): dense kernels use variance scaling (scale 1, fan-avg, uniform) with zero
biases, activations are (tanh-approximated) GELU, LayerNorm (epsilon 1e-6) follows each activated layer
of a value net, and the actor's mean head is initialised with scale 1e-2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

LAYER_NORM_EPS = 1e-6
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0


def variance_scaling_uniform(key: PRNGKeyArray, in_dim: int, out_dim: int, scale: float = 1.0) -> Array:
    """Flax's ``variance_scaling(scale, 'fan_avg', 'uniform')`` for an ``(in_dim, out_dim)`` kernel."""
    u = jax.random.uniform(key, (in_dim, out_dim), minval=-1.0, maxval=1.0)
    return _fan_avg_limit(in_dim, out_dim, scale) * u


def _fan_avg_limit(in_dim: int, out_dim: int, scale: float) -> float:
    return math.sqrt(3.0 * scale / ((in_dim + out_dim) / 2.0))


@jax.custom_vjp
def dense(x: Float[Array, "*batch in"], weight: Float[Array, "in out"], bias: Float[Array, " out"]):
    """``x @ weight + bias`` with a hand-written backward pass whose kernel gradient ``x^T g`` is a matmul in
    standard form: XLA's CPU backend sends only dots that contract the lhs's last axis to its fast (YNNPACK)
    kernels, and autodiff's ``x^T g`` (contracting the rows) ran on the generic emitter, about 4x slower per FLOP
    (benchmarks/profile_ttt.py). The transposed ``x`` is materialised behind an optimisation barrier so that XLA
    cannot fold the transpose back into the dot. Same maths; results move only by float rounding."""
    return x @ weight + bias


def _dense_fwd(x, weight, bias):
    return x @ weight + bias, (x, weight)


def _dense_bwd(res, g):
    x, weight = res
    rows_x = x.reshape(-1, x.shape[-1])
    rows_g = g.reshape(-1, g.shape[-1])
    x_t = jax.lax.optimization_barrier(rows_x.T)  # (in, rows), laid out row-major
    return g @ weight.T, x_t @ rows_g, rows_g.sum(axis=0)


dense.defvjp(_dense_fwd, _dense_bwd)


class Linear(eqx.Module):
    """Dense layer ``y = x @ weight + bias`` (weight stored ``(in, out)`` like a Flax kernel); build a fresh
    one with ``make_linear``."""

    weight: Float[Array, "in out"]
    bias: Float[Array, " out"]

    def __call__(self, x: Float[Array, "*batch in"]) -> Float[Array, "*batch out"]:
        return dense(x, self.weight, self.bias)


def make_linear(key: PRNGKeyArray, in_dim: int, out_dim: int, *, init_scale: float = 1.0) -> Linear:
    """A dense layer with a variance-scaling kernel (``init_scale``) and a zero bias, as Flax's Dense."""
    return Linear(variance_scaling_uniform(key, in_dim, out_dim, init_scale), jnp.zeros((out_dim,)))


class LayerNorm(eqx.Module):
    """LayerNorm over the last axis with learned scale and bias (Flax defaults, epsilon 1e-6)."""

    scale: Float[Array, " dim"]
    bias: Float[Array, " dim"]

    def __init__(self, dim: int):
        self.scale = jnp.ones((dim,))
        self.bias = jnp.zeros((dim,))

    def __call__(self, x: Float[Array, "*batch dim"]) -> Float[Array, "*batch dim"]:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.var(x, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + LAYER_NORM_EPS) * self.scale + self.bias


class MLP(eqx.Module):
    """OGBench's MLP: ``Dense -> GELU [-> LayerNorm]`` per layer; the last layer is linear unless
    ``activate_final``. ``dims`` lists every layer's width, the output width last. Kernels use
    variance scaling (scale 1; ``final_init_scale`` for the last layer), biases are zero."""

    layers: tuple[Linear, ...]
    norms: tuple[LayerNorm, ...]
    activate_final: bool = eqx.field(static=True)
    layer_norm: bool = eqx.field(static=True)

    def __init__(
        self,
        key: PRNGKeyArray,
        in_dim: int,
        dims: Sequence[int],
        *,
        activate_final: bool = False,
        layer_norm: bool = False,
        final_init_scale: float = 1.0,
    ):
        dims = tuple(int(d) for d in dims)
        widths = (in_dim, *dims)
        sizes = [widths[i] * widths[i + 1] for i in range(len(dims))]
        # One uniform draw for all kernels (one RNG call compiles far faster than one per layer).
        u = jax.random.uniform(key, (sum(sizes),), minval=-1.0, maxval=1.0)
        layers, start = [], 0
        for i, size in enumerate(sizes):
            scale = final_init_scale if i == len(dims) - 1 else 1.0
            kernel = _fan_avg_limit(widths[i], widths[i + 1], scale) * u[start : start + size]
            layers.append(Linear(kernel.reshape(widths[i], widths[i + 1]), jnp.zeros((widths[i + 1],))))
            start += size
        self.layers = tuple(layers)
        n_act = len(dims) if activate_final else len(dims) - 1
        self.norms = tuple(LayerNorm(dims[i]) for i in range(n_act)) if layer_norm else ()
        self.activate_final = activate_final
        self.layer_norm = layer_norm

    def __call__(self, x: Float[Array, "*batch in"]) -> Float[Array, "*batch out"]:
        n = len(self.layers)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < n or self.activate_final:
                x = jax.nn.gelu(x, approximate=True)
                if self.layer_norm:
                    x = self.norms[i](x)
        return x


class GaussianActor(eqx.Module):
    """OGBench's ``GCActor(state_dependent_std=False, tanh_squash=False)``: a diagonal Gaussian over actions.

    ``trunk`` is ``MLP(hidden_dims, activate_final=True)`` without LayerNorm; ``mean_head`` is a dense
    layer initialised with scale ``final_init_scale`` (1e-2). ``const_std=True`` fixes the standard
    deviation at 1 (OGBench's default for GC-BC, GC-IQL and QRL); otherwise a state-independent
    ``log_stds`` vector (initialised at 0) is learned. Log-stds are clipped to ``[-5, 2]``. The mean is
    not squashed.
    """

    trunk: MLP
    mean_head: Linear
    log_stds: Float[Array, " act"] | None
    const_std: bool = eqx.field(static=True)

    def __init__(
        self,
        key: PRNGKeyArray,
        obs_dim: int,
        goal_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int],
        *,
        const_std: bool = True,
        final_init_scale: float = 1e-2,
    ):
        k_trunk, k_mean = jax.random.split(key)
        self.trunk = MLP(k_trunk, obs_dim + goal_dim, hidden_dims, activate_final=True, layer_norm=False)
        self.mean_head = make_linear(k_mean, tuple(hidden_dims)[-1], action_dim, init_scale=final_init_scale)
        self.log_stds = None if const_std else jnp.zeros((action_dim,))
        self.const_std = const_std

    def __call__(
        self, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch goal"]
    ) -> tuple[Float[Array, "*batch act"], Float[Array, "*batch act"]]:
        """Mean and standard deviation of the action distribution."""
        mean = self.mean_head(self.trunk(jnp.concatenate([obs, goal], axis=-1)))
        log_std = jnp.zeros_like(mean) if self.log_stds is None else jnp.broadcast_to(self.log_stds, mean.shape)
        return mean, jnp.exp(jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))

    def log_prob(
        self, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch goal"], actions: Float[Array, "*batch act"]
    ) -> Float[Array, "*batch"]:
        """Log-density of ``actions`` under the diagonal Gaussian (summed over action dimensions)."""
        mean, std = self(obs, goal)
        return gaussian_log_prob(mean, std, actions)

    def sample(
        self,
        obs: Float[Array, "*batch obs"],
        goal: Float[Array, "*batch goal"],
        key: PRNGKeyArray,
        temperature: float | Float[Array, ""] = 1.0,
    ) -> Float[Array, "*batch act"]:
        """Reparameterised sample with the std scaled by ``temperature`` (0 gives the mean); not clipped."""
        mean, std = self(obs, goal)
        return mean + temperature * std * jax.random.normal(key, mean.shape, mean.dtype)


def gaussian_log_prob(
    mean: Float[Array, "*batch act"], std: Float[Array, "*batch act"], x: Float[Array, "*batch act"]
) -> Float[Array, "*batch"]:
    """Log-density of a diagonal Gaussian, summed over the last axis."""
    z = (x - mean) / std
    return jnp.sum(-0.5 * z**2 - jnp.log(std) - 0.5 * math.log(2.0 * math.pi), axis=-1)


class GCValue(eqx.Module):
    """OGBench's ``GCValue``: an MLP on ``[obs, goal(, action)]`` with a scalar output.

    ``ensemble=1`` gives one head with output ``*batch``; ``ensemble=n > 1`` stacks ``n`` independently
    initialised MLPs along a leading parameter axis (applied with ``eqx.filter_vmap``) and returns
    ``(n, *batch)``. LayerNorm follows every hidden activation when ``layer_norm``.
    """

    net: MLP
    ensemble: int = eqx.field(static=True)

    def __init__(
        self,
        key: PRNGKeyArray,
        in_dim: int,
        hidden_dims: Sequence[int],
        *,
        layer_norm: bool = True,
        ensemble: int = 1,
    ):
        dims = (*tuple(hidden_dims), 1)

        def make(k: PRNGKeyArray) -> MLP:
            return MLP(k, in_dim, dims, activate_final=False, layer_norm=layer_norm)

        if ensemble == 1:
            self.net = make(key)
        else:
            self.net = eqx.filter_vmap(make)(jax.random.split(key, ensemble))
        self.ensemble = ensemble

    def __call__(
        self,
        obs: Float[Array, "*batch obs"],
        goal: Float[Array, "*batch goal"],
        actions: Float[Array, "*batch act"] | None = None,
    ) -> Float[Array, "*ens_batch"]:
        """``V(s, g)`` or ``Q(s, g, a)``: shape ``*batch`` for one head, ``(ensemble, *batch)`` otherwise."""
        parts = [obs, goal] if actions is None else [obs, goal, actions]
        x = jnp.concatenate(parts, axis=-1)
        if self.ensemble == 1:
            return self.net(x)[..., 0]
        return eqx.filter_vmap(lambda net: net(x)[..., 0])(self.net)


def iqe_components(x: Float[Array, "*batch comp k"], y: Float[Array, "*batch comp k"]) -> Float[Array, "*batch comp"]:
    """Per-component IQE distance: the total length of the union of the intervals ``[x_i, y_i]`` with
    ``x_i < y_i`` (empty otherwise), over the last axis.

    In start order, interval ``i`` adds the part of it beyond ``max(x_i, M_i)``, where ``M_i`` is the largest
    end among the intervals that start before it (ties broken by index). With k = 8 per component, ``M_i`` is
    computed from all k x k pairs: no sort, which XLA runs (and differentiates) slowly on CPU. An empty interval
    gets end = start, which adds nothing and never raises a later ``M_i`` above that interval's start.
    """
    end = jnp.maximum(x, y)
    k = x.shape[-1]
    earlier_index = jnp.arange(k)[None, :] < jnp.arange(k)[:, None]  # [i, j]: j < i
    xi, xj = x[..., :, None], x[..., None, :]
    before = (xj < xi) | ((xj == xi) & earlier_index)  # [..., i, j]: j starts before i
    prev_max = jnp.max(jnp.where(before, end[..., None, :], -jnp.inf), axis=-1)
    return jnp.sum(jnp.maximum(end - jnp.maximum(x, prev_max), 0.0), axis=-1)


def iqe_distance(
    phi_s: Float[Array, "*batch latent"],
    phi_g: Float[Array, "*batch latent"],
    alpha: Float[Array, ""],
    dim_per_component: int,
) -> Float[Array, "*batch"]:
    """IQE quasimetric ``alpha * mean(components) + (1 - alpha) * max(components)`` between latents."""
    x = jnp.reshape(phi_s, (*phi_s.shape[:-1], -1, dim_per_component))
    y = jnp.reshape(phi_g, (*phi_g.shape[:-1], -1, dim_per_component))
    x, y = jnp.broadcast_arrays(x, y)
    comps = iqe_components(x, y)
    return alpha * comps.mean(axis=-1) + (1.0 - alpha) * comps.max(axis=-1)


class IQEValue(eqx.Module):
    """OGBench's ``GCIQEValue``: ``d(s, g) = IQE(phi(s), phi(g))`` with ``phi`` an MLP to ``latent_dim``
    (LayerNorm in the hidden layers) and a learned mixing weight ``sigmoid(alpha_logit)`` (logit init 0)."""

    phi: MLP
    alpha_logit: Float[Array, ""]
    latent_dim: int = eqx.field(static=True)
    dim_per_component: int = eqx.field(static=True)

    def __init__(
        self,
        key: PRNGKeyArray,
        obs_dim: int,
        hidden_dims: Sequence[int],
        *,
        latent_dim: int = 512,
        dim_per_component: int = 8,
        layer_norm: bool = True,
    ):
        if latent_dim % dim_per_component != 0:
            raise ValueError(f"latent_dim {latent_dim} is not a multiple of dim_per_component {dim_per_component}")
        self.phi = MLP(key, obs_dim, (*tuple(hidden_dims), latent_dim), activate_final=False, layer_norm=layer_norm)
        self.alpha_logit = jnp.zeros(())
        self.latent_dim = latent_dim
        self.dim_per_component = dim_per_component

    def encode(self, x: Float[Array, "*batch obs"]) -> Float[Array, "*batch latent"]:
        """The latent ``phi(x)``."""
        return self.phi(x)

    def latent_distance(
        self, phi_s: Float[Array, "*batch latent"], phi_g: Float[Array, "*batch latent"]
    ) -> Float[Array, "*batch"]:
        """Quasimetric distance between latents (OGBench's ``is_phi=True``)."""
        return iqe_distance(phi_s, phi_g, jax.nn.sigmoid(self.alpha_logit), self.dim_per_component)

    def __call__(self, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "*batch"]:
        """Quasimetric distance ``d(obs, goal)``."""
        return self.latent_distance(self.encode(obs), self.encode(goal))
