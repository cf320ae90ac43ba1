"""Issue 48: the README is the page a newcomer reads in five minutes, and every page it leads to exists. Its sample
output is held to a run by tests/e2e/test_demo.py; here, its size, its links and the network scope it documents."""

from __future__ import annotations

import re

import yaml

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_a_five_minute_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail into docs/"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:2] == ["## Two commands", "## A short sample"], headings


def test_every_relative_link_of_the_docs_leads_somewhere() -> None:
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in PAGES
        for target in _LINK.findall(page.read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "mailto:")) and not (page.parent / target).exists()
    ]
    assert not broken, broken


def test_the_documented_network_scope_is_the_shipped_one() -> None:
    shipped = yaml.safe_load((ROOT / "governor.yaml").read_text(encoding="utf-8"))["network"]["scope"]
    assert shipped == "fleet"
    page = (ROOT / "docs" / "capabilities.md").read_text(encoding="utf-8")
    assert f"the shipped `{shipped}`" in page
    assert "applies to every security group in the region" not in page
