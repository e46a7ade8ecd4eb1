"""The README and docs/ describe the repository as it is: every path they name in
backticks (fuser/..., tests/..., docs/..., tools/..., asv_bench/...) exists, and nothing
points outside the repository (`../`), where a user has nothing."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if (ROOT / "docs").is_dir() else []
_PATH = re.compile(r"`((?:fuser|tests|docs|tools|asv_bench)/[\w./-]*)`")


@pytest.mark.skipif(not DOCS, reason="the docs are in the source tree only (not in an installed wheel)")
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_name_only_paths_that_exist(doc):
    text = doc.read_text(encoding="utf-8")
    missing = sorted({p for p in _PATH.findall(text) if not (ROOT / p.rstrip("/.")).exists()})
    assert not missing, f"{doc.name} names paths the repository does not have: {missing}"
    assert "../" not in text, f"{doc.name} points outside the repository"


def test_the_path_check_can_fail():
    assert _PATH.findall("see `fuser/no_such_module.py` and `tests/`") == ["fuser/no_such_module.py", "tests/"]
    assert not (ROOT / "fuser/no_such_module.py").exists()
