"""ttt: goal-conditioned test-time training (GC-TTT) for offline goal-conditioned RL, in JAX/Equinox."""

__version__ = "0.1.0"
