"""OGBench's MuJoCo environments stepped on the host inside the compiled program: what the ant mazes
(``ttt.envs.antmaze``), the humanoid mazes (``ttt.envs.humanoidmaze``) and cube-single (``ttt.envs.cube``) share.

- The physics state of one episode is MuJoCo's integration state (``mj_getState(..., mjSTATE_INTEGRATION)``: time,
  qpos, qvel, warm start, controls, mocap bodies, ...), float64, carried through the program as twice as many uint32
  words (``pack`` / ``unpack``): JAX computes in float32 unless x64 is on, and a float32 copy would drift from
  OGBench's float64 trajectory. Restoring it with ``mj_setState`` and stepping continues the trajectory bit for bit
  (tested against OGBench's gymnasium env).
- ``RowRunner`` runs a per-episode host function over the rows of a batch (the leading axes of a vmapped
  ``jax.pure_callback``), split over worker contexts (each with its own ``MjData``) on threads: MuJoCo releases
  the GIL in ``mj_step``, so C physics of several episodes runs on several cores. Every worker context is made on
  the host at construction: XLA runs callbacks on its own threads, whose Python thread state is torn down after
  every call, and freeing an ``MjData`` there crashes the interpreter (see ``ttt.envs.pointmaze._HostPhysics``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np

SPEC = mujoco.mjtState.mjSTATE_INTEGRATION  # everything mj_step reads: bit-exact continuation


def state_size(model: mujoco.MjModel) -> int:
    """Float64 numbers in one integration state of ``model``."""
    return int(mujoco.mj_stateSize(model, SPEC))


def get_state(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """The integration state of ``data`` (float64)."""
    out = np.empty(state_size(model), np.float64)
    mujoco.mj_getState(model, data, out, SPEC)
    return out


def set_state(model: mujoco.MjModel, data: mujoco.MjData, state: np.ndarray) -> None:
    """Restore an integration state into ``data`` (derived quantities are NOT recomputed)."""
    mujoco.mj_setState(model, data, np.ascontiguousarray(state, np.float64), SPEC)


def pack(state: np.ndarray) -> np.ndarray:
    """Float64 states ``(..., n)`` as uint32 words ``(..., 2n)``, bit for bit."""
    return np.ascontiguousarray(state, np.float64).view(np.uint32)


def unpack(words: np.ndarray) -> np.ndarray:
    """Inverse of ``pack``: uint32 words ``(..., 2n)`` as float64 ``(..., n)``."""
    return np.ascontiguousarray(words, np.uint32).view(np.float64)


def default_workers(batch_hint: int | None = None) -> int:
    """Worker threads for the C physics: the cores this process may use (``TTT_ENV_THREADS`` overrides)."""
    env = os.environ.get("TTT_ENV_THREADS")
    if env:
        return max(1, int(env))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, n if batch_hint is None else min(n, batch_hint))


class RowRunner:
    """``fn(ctx, *row_args) -> tuple of row outputs``, run over every row of a batch.

    ``contexts``: one per worker (e.g. an ``MjData``), each used by one thread at a time (its own lock). The rows are
    split into contiguous chunks, one per worker; with one worker they run on the calling thread. Hashes by identity
    (it is a static field of an env): one instance per env id is cached, so rebuilt envs reuse compiled programs.
    """

    def __init__(self, fn: Callable, contexts: Sequence, out_specs: Sequence[tuple[tuple[int, ...], np.dtype]]):
        self.fn = fn
        self.contexts = list(contexts)
        self.out_specs = [(tuple(s), np.dtype(d)) for s, d in out_specs]
        self._locks = [threading.Lock() for _ in self.contexts]
        self._pool = ThreadPoolExecutor(len(self.contexts)) if len(self.contexts) > 1 else None
        self.seconds = 0.0  # wall time spent in calls (benchmarks read it: the environment's share of an episode)
        self.calls = 0

    def _chunk(self, w: int, rows: range, args: Sequence[np.ndarray], outs: list[np.ndarray]) -> None:
        with self._locks[w]:
            ctx = self.contexts[w]
            for i in rows:
                res = self.fn(ctx, *(a[i] for a in args))
                for o, r in zip(outs, res, strict=True):
                    o[i] = r

    def __call__(self, n_batch_dims: int, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run over the leading ``n_batch_dims`` axes shared by every argument; outputs keep those axes."""
        t0 = time.perf_counter()
        args = [np.asarray(a) for a in args]
        lead = args[0].shape[:n_batch_dims]
        n = int(np.prod(lead, dtype=np.int64))
        flat = [a.reshape((n,) + a.shape[n_batch_dims:]) for a in args]
        outs = [np.empty((n,) + s, d) for s, d in self.out_specs]
        k = min(len(self.contexts), max(n, 1))
        bounds = np.linspace(0, n, k + 1).astype(int)
        chunks = [range(bounds[w], bounds[w + 1]) for w in range(k)]
        if self._pool is None or k == 1:
            for w, rows in enumerate(chunks):
                self._chunk(w, rows, flat, outs)
        else:
            for f in [self._pool.submit(self._chunk, w, rows, flat, outs) for w, rows in enumerate(chunks)]:
                f.result()
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return tuple(o.reshape(lead + o.shape[1:]) for o in outs)


def uniforms(bits: np.ndarray) -> np.ndarray:
    """Uniform float64 numbers in [0, 1) from uint32 pairs ``(..., 2)``, 53 random bits each (NumPy's recipe).

    The in-program envs draw random BITS from their keys (integers: the same in every program, however XLA fuses
    it) and the host turns them into OGBench's float64 draws, so both drivers start from the same numbers."""
    b = np.asarray(bits, np.uint32).astype(np.uint64)
    return ((b[..., 0] >> np.uint64(5)).astype(np.float64) * 67108864.0
            + (b[..., 1] >> np.uint64(6)).astype(np.float64)) / 9007199254740992.0  # fmt: skip


def normals(u: np.ndarray) -> np.ndarray:
    """Standard normal numbers from uniform pairs ``(..., 2)`` (Box-Muller)."""
    return np.sqrt(-2.0 * np.log1p(-u[..., 0])) * np.cos(2.0 * np.pi * u[..., 1])


def uniforms_in_program(bits):
    """``uniforms`` in the program, to float32 precision (the top 24 bits of the first word)."""
    import jax.numpy as jnp

    return (bits[..., 0] >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)
