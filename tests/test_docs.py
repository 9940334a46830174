"""docs/extending.md's worked example runs as written: a new backbone, environment and selection rule together in
compiled GC-TTT episodes."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_extending_worked_example_runs():
    text = (DOCS / "extending.md").read_text()
    section = text.split("<!-- worked-example:start -->")[1].split("<!-- worked-example:end -->")[0]
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.S))
    assert "make_backbone(globals())" in code and "class WindyPoint" in code and "shortest_spans" in code
    assert "BACKBONES" not in code  # a backbone of one's own is a value passed in: no global registry is touched
    import sys
    import types

    from ttt.agents import BACKBONES

    before = dict(BACKBONES)
    module = types.ModuleType("extending_example")  # dataclasses look their class's module up in sys.modules
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, "docs/extending.md", "exec"), module.__dict__)  # noqa: S102
    finally:
        sys.modules.pop(module.__name__, None)
    assert BACKBONES == before
    out = module.out
    assert out.success.shape == (4,) and out.rounds["n_selected"].shape[0] == 4
    assert int(out.rounds["n_selected"][:, 0].min()) > 0  # the new rule selected data in the first round


def test_docs_are_linked_from_the_readme():
    readme = (DOCS.parent / "README.md").read_text()
    for name in ("architecture.md", "extending.md", "algorithm.md", "reference.md", "datasets.md", "testing.md"):
        assert f"docs/{name}" in readme and (DOCS / name).exists()


def test_every_shipped_pipeline_is_named_in_the_readme_and_reference():
    """README.md's list of shipped pipelines and docs/reference.md's table name every file under pipelines/."""
    readme, reference = (DOCS.parent / "README.md").read_text(), (DOCS / "reference.md").read_text()
    names = sorted(p.stem for p in (DOCS.parent / "pipelines").glob("*.toml"))
    assert len(names) >= 10
    assert [n for n in names if f"`{n}`" not in readme] == []
    assert [n for n in names if f"| `{n}` |" not in reference] == []


def test_readme_results_teaser_is_the_front_pages():
    """README.md's results teaser quotes benchmarks/README.md (generated from the records): each of its lines is a
    line of the front page as it stands, so a regenerated front page cannot leave the teaser behind."""
    readme = (DOCS.parent / "README.md").read_text()
    teaser = readme.split("<!-- teaser:start -->")[1].split("<!-- teaser:end -->")[0]
    front = set((DOCS.parent / "benchmarks" / "README.md").read_text().splitlines())
    lines = [ln for ln in teaser.splitlines() if ln.strip()]
    assert len(lines) >= 5 and [ln for ln in lines if ln not in front] == []


TESTED_SECTIONS = {  # marked sections of docs/ whose Python blocks a test executes
    "worked-example": "tests/test_docs.py::test_extending_worked_example_runs",
    "context-rule": "tests/test_api.py::test_the_one_function_rule_of_extending_md_runs_as_written",
    "graph-search": "tests/test_api.py::test_the_graph_search_example_of_extending_md_runs_as_written",
}


def test_every_python_example_in_docs_is_run():
    """A Python block in docs/ outside the sections that tests execute would not run in any test: there is none."""
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        for name in TESTED_SECTIONS:
            start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
            if start in text:
                text = text.split(start)[0] + text.split(end)[1]
        assert "```python" not in text, f"{path.name} has a Python example that no test runs"


def test_reference_pipeline_keys_table_is_the_code_s():
    """docs/reference.md's run-keys table is `keys_markdown()`: a key added to `RUN_KEYS` without its line fails."""
    from ttt.pipeline.config import RUN_KEYS, keys_markdown

    reference = (DOCS / "reference.md").read_text()
    assert keys_markdown() in reference, "regenerate docs/reference.md's keys table from keys_markdown()"
    assert all(f"| `{k}` |" in keys_markdown() for k in RUN_KEYS)
