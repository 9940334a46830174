"""Deprecated: moved to `ttt.pipeline.report` (reports belong to the run layer)."""

from ttt._moved import alias

alias(__name__, "ttt.pipeline.report")
