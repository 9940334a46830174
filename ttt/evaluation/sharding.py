"""Where a compiled batch runs: the batch sharded over a 1-d mesh of devices (`batch_sharding`), the episodes per
call (`call_size`), and across processes the inputs each process contributes (`put_global`) and the outputs
gathered from all of them (`fetch`)."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np

from ttt.errors import TttError


def put_global(tree, sharding):
    """Multi-process `device_put`: every process holds the same host value of each leaf and contributes the
    shards its own devices hold (typed PRNG keys travel as their key data)."""
    from jax.experimental import multihost_utils  # noqa: F401  (initialises the multi-host helpers)

    def one(x):
        if not eqx.is_array(x):
            return x
        is_key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        host = np.asarray(jax.random.key_data(x) if is_key else x)
        g = jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
        return jax.random.wrap_key_data(g, impl=jax.random.key_impl(x)) if is_key else g

    return jax.tree.map(one, tree)


def fetch(x) -> np.ndarray:
    """A program output as a host array; across processes, the global array gathered from every process."""
    if jax.process_count() > 1 and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def batch_sharding(n_devices: int | None = None):
    """`(batch, replicated)` NamedShardings over a 1-d mesh of the first `n_devices` devices (default: all)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    n = len(devices) if n_devices is None else n_devices
    if not 1 <= n <= len(devices):
        raise TttError(f"devices must be in [1, {len(devices)}] (the devices JAX sees), got {n}")
    mesh = Mesh(np.array(devices[:n]), ("batch",))
    return NamedSharding(mesh, PartitionSpec("batch")), NamedSharding(mesh, PartitionSpec())


def call_size(total: int, batch_size: int, n_devices: int = 1) -> int:
    """Episodes per compiled call: at most `batch_size` rounded down to a multiple of the device count (at least one
    episode per device), as few calls as that allows, split evenly, each a multiple of the device count. The last
    call is padded with repeats to the same shape, so 30 episodes at `batch_size` 25 run as two calls of 15, not
    25 + 25 (20 of them repeats)."""
    limit = max(n_devices, batch_size // n_devices * n_devices)
    calls = -(-total // min(limit, total))  # ceil division throughout
    per_call = -(-total // calls)
    return -(-per_call // n_devices) * n_devices
