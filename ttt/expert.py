"""Deprecated: moved to `ttt.data.expert` (the SAC ant expert is a data-generation tool)."""

from ttt._moved import alias

alias(__name__, "ttt.data.expert")
