"""Backbones: one module per offline GCRL algorithm, each exposing the same pure functions.

Every backbone module defines ``Config``, ``Agent``, ``init``, ``loss``, ``target_update`` and ``value``
(``act``, ``has_value`` and ``BATCH_FN`` where it differs from the defaults in ``common``) and collects them in
``BACKBONE = make_backbone(globals())`` (a ``common.Backbone``). Look one up by name with ``get_backbone``.
"""

from __future__ import annotations

from ttt.agents import gcbc, gciql, qrl, saw
from ttt.agents.common import Backbone
from ttt.errors import TttError

BACKBONES: dict[str, Backbone] = {
    gcbc.NAME: gcbc.BACKBONE,
    gciql.NAME: gciql.BACKBONE,
    qrl.NAME: qrl.BACKBONE,
    saw.NAME: saw.BACKBONE,
}


def get_backbone(name: str) -> Backbone:
    """The backbone called ``name``; raises TttError listing the valid names otherwise."""
    try:
        return BACKBONES[name]
    except KeyError:
        raise TttError(f"unknown backbone {name!r}; valid: {', '.join(sorted(BACKBONES))}") from None


__all__ = ["BACKBONES", "Backbone", "get_backbone", "gcbc", "gciql", "qrl", "saw"]
