"""The documentation stays true: the user performance page is short and quotes only figures the
developers' notebook measured, links between the docs resolve, and a section cited by name in a
performance page exists there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
USER_PAGE = DOCS / "performance.md"
NOTEBOOK = DOCS / "dev" / "performance-notebook.md"
#: A figure as written on the pages: 2.00, 11,304, 1.75–2.0, 0.360.
NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:[–-]\d+(?:[.,]\d+)*)?")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+\s+(.+)$", page.read_text(), flags=re.M)}


def test_the_user_performance_page_is_short_and_points_to_the_notebook():
    text = USER_PAGE.read_text()
    assert len(text.splitlines()) <= 120
    assert "(dev/performance-notebook.md)" in text and "make bench" in text
    for knob in ("batch", "RAYON_NUM_THREADS", "float32", "party loop", "Deployment"):
        assert knob in text, knob
    assert len(NOTEBOOK.read_text().splitlines()) > 800  # the notebook, moved whole


def test_every_figure_of_the_user_page_is_one_the_notebook_states():
    from pfair.settings import AUTO_BATCH_NONPRIVATE, AUTO_BATCH_PRIVATE

    notebook = NOTEBOOK.read_text()
    settings = {str(AUTO_BATCH_PRIVATE), str(AUTO_BATCH_NONPRIVATE)}
    unknown = sorted({n for n in NUMBER.findall(USER_PAGE.read_text()) if n not in notebook} - settings)
    assert not unknown, f"figures on docs/performance.md that docs/dev/performance-notebook.md does not state: {unknown}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve()
        assert linked.exists(), f"{page.name}: link to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: no section #{anchor} in {path}"


def test_sections_cited_by_name_exist_in_the_page_cited():
    cited = re.compile(r"`docs/((?:dev/)?performance(?:-notebook)?\.md)`,\s+\"([^\"]+)\"")
    for page in _pages():
        for path, name in cited.findall(page.read_text()):
            target = (DOCS.parent / "docs" / path).read_text()
            name = " ".join(name.split())
            starts = [" ".join(h.split()) for h in re.findall(r"^#+\s+(.+)$", target, flags=re.M)]
            starts += [" ".join(b.split()) for b in re.findall(r"^\*\*(.+?)\*\*", target, flags=re.M | re.S)]
            assert any(s.startswith(name) for s in starts), f"{page.name}: {path} has no section {name!r}"
