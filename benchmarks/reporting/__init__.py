"""The report engine: study declarations (benchmarks/studies/*.toml) in, results pages out (`benchmarks/report.py`).

`records`: every committed record found by its key; `stats`-backed cells and the renderers of each table kind
(`tables`); `pages`: a declaration's sections (text beside tables) assembled into a page.
"""
