"""Backbones: one module per offline GCRL algorithm, each exposing the same pure functions.

Every backbone module defines ``Config``, ``Agent``, ``init``, ``loss``, ``target_update`` and ``value``
(``act``, ``has_value`` and ``BATCH_FN`` where it differs from the defaults in ``common``) and collects them in
``BACKBONE = make_backbone(globals())`` (a ``common.Backbone``). Look one up by name with ``get_backbone``. Each
also declares how OGBench's code saves it, ``OGBENCH`` (an ``ogbench_layout.OgbenchLayout``, collected in
``OGBENCH_LAYOUTS``), which ``ttt.interop`` reads and writes.
"""

from __future__ import annotations

from ttt.agents import gcbc, gciql, qrl, saw
from ttt.agents.common import Backbone
from ttt.agents.ogbench_layout import OgbenchLayout
from ttt.errors import TttError

BACKBONES: dict[str, Backbone] = {
    gcbc.NAME: gcbc.BACKBONE,
    gciql.NAME: gciql.BACKBONE,
    qrl.NAME: qrl.BACKBONE,
    saw.NAME: saw.BACKBONE,
}

OGBENCH_LAYOUTS: dict[str, OgbenchLayout] = {m.NAME: m.OGBENCH for m in (gcbc, gciql, qrl, saw)}
"""The agents `ttt import ogbench` / `ttt export ogbench` know, each with its layout in OGBench's format."""


def get_backbone(name: str) -> Backbone:
    """The backbone called ``name``; raises TttError listing the valid names otherwise."""
    try:
        return BACKBONES[name]
    except KeyError:
        raise TttError(f"unknown backbone {name!r}; valid: {', '.join(sorted(BACKBONES))}") from None


__all__ = ["BACKBONES", "OGBENCH_LAYOUTS", "Backbone", "OgbenchLayout", "get_backbone", "gcbc", "gciql", "qrl", "saw"]
