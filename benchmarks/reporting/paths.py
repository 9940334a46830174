"""Where the repository is: the one fact every reporting module needs (kept apart so no two modules import each
other for it)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
