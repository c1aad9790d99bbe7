"""README.md and docs/: every relative link names a file that exists, and every `#anchor` a heading of it."""

import pathlib
import re

import pytest

from conftest import REPO

ROOT = pathlib.Path(REPO)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def links(text):
    """Markdown links outside code: indented blocks, fences and inline code spans are not links."""
    text = FENCE.sub("", text)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("    "))
    text = re.sub(r"`[^`]*`", "", text)
    return LINK.findall(text)


def anchors(path):
    """GitHub's and MyST's heading slugs: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    slugs = set()
    for line in text.splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            slugs.add(slug)
    return slugs


def test_links_finds_links_but_not_code():
    text = "see [a](a.md) and `[b](b.md)`\n\n    [c](c.md)\n```\n[d](d.md)\n```\n![img](e.png) [f](f.md#x)"
    assert links(text) == ["a.md", "f.md#x"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    assert not broken, broken


def test_every_docs_page_is_in_the_site_and_linked_from_the_readme():
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index"}
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    toctree = set(re.search(r"```\{toctree\}(.*?)```", index, re.S).group(1).split()) - {":maxdepth:", "1"}
    assert toctree == pages
    readme = {pathlib.Path(t.partition("#")[0]).stem for t in links((ROOT / "README.md").read_text())
              if t.startswith("docs/")}
    assert readme == pages


def test_the_readme_reads_in_ten_minutes():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300
