"""The selection controls that pipelines name (`selection = "optimal"`, `"random"`, `"random-rank"`): transforms
swapped into a run's `Transforms` by its plan (`ttt.pipeline.plan`)."""

from __future__ import annotations

import dataclasses

import jax

from ttt.select import select


def relevance_everywhere(ctx):
    """Selection ablation 'optimal only' / 'random': every eligible row counts as relevant."""
    return ctx.tables.eligible


def select_random_rank(ctx):
    """Selection control 'random-rank': the same relevant rows and the same number kept, ranked by random scores
    instead of returns."""
    k_score, k_sel = jax.random.split(ctx.key)
    tables = ctx.tables
    scores = jax.random.uniform(k_score, tables.returns.shape, tables.returns.dtype)
    return select(k_sel, dataclasses.replace(tables, returns=scores), ctx.relevant, ctx.cfg, ctx.params)
