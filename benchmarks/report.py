"""Regenerate every results page from the study declarations and the committed records.

    python benchmarks/report.py            # write every page
    python benchmarks/report.py --check    # exit 1, one line per page, where a committed page differs
    python benchmarks/report.py --list     # which page each declaration writes

Each study is a declaration, benchmarks/studies/NAME.toml: the pipelines that produce it, its tables (each cell naming
the record it reads by key: run name and evaluation key, or dataset, agent and variant), and the text beside them.
The engine (benchmarks/reporting/) renders every table with `ttt.stats` and its verdict rule; no study has a table
script of its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting.pages import declarations, pages  # noqa: E402
from reporting.records import ROOT  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 where a page differs")
    ap.add_argument("--list", action="store_true", help="print each declaration and the page it writes")
    a = ap.parse_args(argv)
    if a.list:
        for name, d in declarations().items():
            print(f"benchmarks/studies/{name}.toml -> {d.get('page', '-')}")
        return 0
    differ = 0
    for path, text in pages().items():
        rel = path.relative_to(ROOT).as_posix()
        if a.check:
            if not path.is_file() or path.read_text() != text:
                print(f"{rel}: differs from what the records give (python benchmarks/report.py rewrites it)")
                differ += 1
        elif not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {rel}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
