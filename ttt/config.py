"""Deprecated: moved to `ttt.pipeline.config` (the pipeline schema belongs to the run layer)."""

from ttt._moved import alias

alias(__name__, "ttt.pipeline.config")
