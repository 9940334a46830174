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
    assert "BACKBONES[NAME]" in code and "class WindyPoint" in code and "shortest_spans" in code
    import sys
    import types

    from ttt.agents import BACKBONES

    module = types.ModuleType("extending_example")  # dataclasses look their class's module up in sys.modules
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, "docs/extending.md", "exec"), module.__dict__)  # noqa: S102
    finally:
        BACKBONES.pop("msebc", None)
        sys.modules.pop(module.__name__, None)
    out = module.out
    assert out.success.shape == (4,) and out.rounds["n_selected"].shape[0] == 4
    assert int(out.rounds["n_selected"][:, 0].min()) > 0  # the new rule selected data in the first round


def test_docs_are_linked_from_the_readme():
    readme = (DOCS.parent / "README.md").read_text()
    for name in ("architecture.md", "extending.md", "algorithm.md"):
        assert f"docs/{name}" in readme and (DOCS / name).exists()


def test_every_python_example_in_docs_is_run():
    """A Python block in docs/ outside the worked example would not run in any test: there is none."""
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        if "<!-- worked-example:start -->" in text:
            text = text.split("<!-- worked-example:start -->")[0] + text.split("<!-- worked-example:end -->")[1]
        assert "```python" not in text, f"{path.name} has a Python example that no test runs"
