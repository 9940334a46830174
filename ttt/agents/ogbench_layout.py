"""How OGBench's code saves an agent, in the terms each agent module declares its own layout in (`OgbenchLayout`).

OGBench's reference agents (`impls/agents/*.py`) and the GC-TTT authors' fork keep one file per agent; so does
`ttt.agents`, and each agent module ends with its `OGBENCH` layout: the `modules_<name>` networks it saves, where
each Flax leaf lives in the `ttt` agent, which config fields the shapes tell, and the reference's `get_config()`
values for the rest. `ttt.interop` reads and writes every agent through these alone (docs/extending.md, "A
backbone"). A Flax MLP holds `Dense_i` / `LayerNorm_i`, an ensemble's leaves stacked on a leading axis, a `kernel`
stored `(in, out)` as ours.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ttt.errors import TttError

FlaxTree = dict[str, Any]
"""Nested dicts of arrays, as `flax.serialization.to_state_dict` gives them (`params['modules_<name>']`)."""

Where = Callable[[Any], Any]
"""Where a leaf lives in a `ttt` agent: the agent -> that array (an `eqx.tree_at` selector)."""

Leaf = tuple[tuple[str, ...], Where]
"""One parameter: (its Flax key path under `params`, where it lives in the `ttt` agent)."""


@dataclasses.dataclass(frozen=True)
class OgbenchLayout:
    """One agent as OGBench's `save_agent` writes it.

    - `networks`: the `modules_<name>` entries of `params`; `optional`: those of them that may be absent (QRL
      with AWR has no `dynamics`).
    - `leaves(agent) -> [Leaf]`: every parameter of a `ttt` agent (or its shape) with its Flax path.
    - `sizes(params, where, actor_in, action_dim) -> dict`: the config fields (and `obs_dim`) the shapes tell,
      beyond the actor's (read the same way for every agent); networks that disagree are one `TttError` line.
    - `config`: the reference's `get_config()` values for what the shapes cannot tell.
    - `dropped`: reference settings with no counterpart here, accepted at this value only (and then dropped).
    - `preset(cfg) -> str`: the `ttt.presets.AGENTS` name of an imported config (default: the backbone's name).
    """

    name: str
    networks: frozenset[str]
    leaves: Callable[[Any], list[Leaf]]
    sizes: Callable[[FlaxTree, str, int, int], dict[str, Any]]
    config: Mapping[str, Any]
    optional: frozenset[str] = frozenset()
    dropped: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    preset: Callable[[Any], str] | None = None

    def preset_of(self, cfg: Any) -> str:
        """The preset name of an imported `cfg`."""
        return self.name if self.preset is None else self.preset(cfg)


# ------------------------------------------------------------------------------------------------ leaf mapping


def mlp_leaves(net: Any, prefix: tuple[str, ...], get: Where) -> list[Leaf]:
    """A `ttt.nets.MLP` at `get(agent)` as Flax's MLP under `prefix`: `Dense_i/{kernel,bias}`,
    `LayerNorm_j/{scale,bias}`."""
    out: list[Leaf] = []
    for i in range(len(net.layers)):
        out.append(((*prefix, f"Dense_{i}", "kernel"), lambda a, i=i: get(a).layers[i].weight))
        out.append(((*prefix, f"Dense_{i}", "bias"), lambda a, i=i: get(a).layers[i].bias))
    for j in range(len(net.norms)):
        out.append(((*prefix, f"LayerNorm_{j}", "scale"), lambda a, j=j: get(a).norms[j].scale))
        out.append(((*prefix, f"LayerNorm_{j}", "bias"), lambda a, j=j: get(a).norms[j].bias))
    return out


def actor_leaves(actor: Any, prefix: tuple[str, ...], get: Where) -> list[Leaf]:
    """OGBench's `GCActor`: `actor_net` (the trunk), `mean_net`, and `log_stds` when the std is learned."""
    out = mlp_leaves(actor.trunk, (*prefix, "actor_net"), lambda a: get(a).trunk)
    out.append(((*prefix, "mean_net", "kernel"), lambda a: get(a).mean_head.weight))
    out.append(((*prefix, "mean_net", "bias"), lambda a: get(a).mean_head.bias))
    if actor.log_stds is not None:
        out.append(((*prefix, "log_stds"), lambda a: get(a).log_stds))
    return out


# ------------------------------------------------------------------------------------------- sizes from shapes


def get_path(tree: Any, path: tuple[str, ...]) -> Any:
    """The entry of nested dicts at `path`, or None where any key is missing."""
    for k in path:
        if not isinstance(tree, dict) or k not in tree:
            return None
        tree = tree[k]
    return tree


def number_array(x: Any, where: str, name: str) -> np.ndarray:
    """A parameter leaf: a NumPy array of real numbers (the safe loader builds only plain dtypes; a list, string,
    bool or None is refused here, naming the leaf)."""
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
        kind = f"dtype {x.dtype}" if isinstance(x, np.ndarray) else type(x).__name__
        raise TttError(f"{where}: {name} is not an array of real numbers ({kind})")
    return x


def kernel(tree: Any, path: tuple[str, ...], where: str, name: str) -> np.ndarray:
    """A Dense layer's kernel: a matrix (an ensemble's: stacked on a leading axis) of real numbers, no side 0."""
    k = get_path(tree, path)
    full = f"{name}/{'/'.join(path)}"
    if k is None:
        raise TttError(f"{where}: {full} is missing")
    k = number_array(k, where, full)
    if k.ndim < 2 or 0 in k.shape:
        raise TttError(f"{where}: {full} is not a matrix (shape {k.shape[:8]})")
    return k


def widths(mlp: Any, where: str, name: str) -> tuple[tuple[int, ...], int, bool]:
    """(out widths of Dense_0.., in width, has LayerNorm) of a Flax MLP dict."""
    if not isinstance(mlp, dict) or "Dense_0" not in mlp:
        raise TttError(f"{where}: {name} is not an MLP (no Dense_0)")
    out, i = [], 0
    while f"Dense_{i}" in mlp:
        out.append(int(kernel(mlp, (f"Dense_{i}", "kernel"), where, name).shape[-1]))
        i += 1
    first = kernel(mlp, ("Dense_0", "kernel"), where, name)
    return tuple(out), int(first.shape[-2]), "LayerNorm_0" in mlp


def obs_from_actor(actor_in: int, where: str) -> int:
    """The observation size of an actor on `[s, g]` (its input width halved; an odd width is refused)."""
    if actor_in % 2:
        raise TttError(f"{where}: the actor's input width {actor_in} is not observation + goal of equal size")
    return actor_in // 2


def actor_only_sizes(params: FlaxTree, where: str, actor_in: int, action_dim: int) -> dict[str, Any]:
    """`sizes` of an agent whose only sized network is its actor on `[s, g]`: the observation size."""
    del params, action_dim
    return dict(obs_dim=obs_from_actor(actor_in, where))
