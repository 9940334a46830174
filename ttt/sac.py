"""Deprecated: moved to `ttt.data.sac` (SAC trains the ant expert that generates antmaze data)."""

from ttt._moved import alias

alias(__name__, "ttt.data.sac")
