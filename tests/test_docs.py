"""Every `docs/<page>.md §N` citation in the code names a page and a section that exist, and no
file of the project cites a document that a clone of the repository does not have."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("graphloom_jax", "configs", "launch", "benchmarks", "tests")
           for p in (ROOT / d).rglob("*.py")] + [ROOT / "README.md"]


def test_doc_citations_resolve():
  cited = 0
  for path in SOURCES:
    for page, section in re.findall(r"docs/(\w+)\.md(?: §(\d+))?", path.read_text()):
      doc = ROOT / "docs" / f"{page}.md"
      assert doc.exists(), f"{path.relative_to(ROOT)} cites docs/{page}.md, which does not exist"
      if section:
        assert re.search(rf"^## §{section} ", doc.read_text(), re.M), (
            f"{path.relative_to(ROOT)} cites docs/{page}.md §{section}, which has no such section")
        cited += 1
  assert cited >= 10


def test_no_citation_of_documents_outside_the_repository():
  for path in SOURCES:
    if path.name == "test_docs.py":
      continue
    assert "MISSION.md" not in path.read_text(), path.relative_to(ROOT)
