"""The demo output the README and docs/demo.md show, from a run: the sample's options, how a block is found in a page,
and what may differ between two runs (the simulated day ends at the last whole hour, and moto draws instance ids).

``python -m tests.e2e.samples`` runs the sample's day and rewrites the blocks; ``tests/e2e/test_demo.py`` holds the
pages to its own run of the same day, so a figure that drifts fails the suite.
"""

from __future__ import annotations

import datetime as dt
import re
import tempfile
from pathlib import Path

from governor.policy import load_policy
from governor_cli.demo.run import DemoOptions, DemoResult, run_demo, summary_lines

ROOT = Path(__file__).resolve().parents[2]
#: The pages that show the sample, each between ``<!-- sample:begin -->`` and ``<!-- sample:end -->``.
PAGES = (ROOT / "README.md", ROOT / "docs" / "demo.md")
#: The sample's day: the e2e suite's report-only day (tests/e2e/test_demo.py), as the command line says it. Its end
#: is pinned: the day's digests post at the whole hours ``notifications.digest_hours`` divides, so a day ending at
#: another hour holds another number of digest posts (a suite run at 10:00 UTC counted one more than the page).
INSTANCES, HOURS = 12, 4.5
END = dt.datetime(2026, 12, 6, 7, 0, tzinfo=dt.UTC)
COMMAND = f"$ governor demo --skip-synth --instances {INSTANCES} --hours {HOURS:g}"
_BLOCK = re.compile(r"(<!-- sample:begin -->\n```\n)(.*?)(```\n<!-- sample:end -->)", re.S)
#: What two runs of the same day may print differently: dates, clock times, instance ids.
_VARIES = (
    (re.compile(r"\d{4}-\d\d-\d\d"), "YYYY-MM-DD"),
    (re.compile(r"\b\d\d:\d\d\b"), "HH:MM"),
    (re.compile(r"\bi-[0-9a-f]{8,17}\b"), "i-ID"),
    # users.info answers are cached per container, and the e2e module's earlier days warm the cache the sample's
    # fresh process does not have: the count of those calls depends on what ran before, not on the day
    (re.compile(r"\b\d+ users\.info, "), ""),
    # which warned instance each owner clicks follows the instances' order, and moto draws their ids at random
    (re.compile(r"(Slack button clicked +\S+(?: \S+)*? on i-ID by )[a-z]+"), r"\1NAME"),
)


def options(out: Path) -> DemoOptions:
    """The sample's day, written to ``out``."""
    return DemoOptions(policy=load_policy(ROOT / "governor.yaml"), out=out, instances=INSTANCES, hours=HOURS, end=END)


def text(result: DemoResult) -> str:
    """The block as the command prints it after the simulated day (the summary; the stack listing is left out), with
    the run's output folder shown as the command's default, ``out``."""
    return "\n".join([COMMAND, *summary_lines(result)]).replace(str(result.out), "out") + "\n"


def shown(page: Path) -> str:
    """The block a page shows; a page without one is an error naming it."""
    found = _BLOCK.search(page.read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{page}: no <!-- sample:begin --> block")
    return found.group(2)


def comparable(block: str) -> list[str]:
    """The block's lines with what varies between runs replaced, trailing spaces dropped."""
    for pattern, placeholder in _VARIES:
        block = pattern.sub(placeholder, block)
    return [line.rstrip() for line in block.strip("\n").split("\n")]


def write(block: str) -> None:
    """Every page's block replaced by ``block``."""
    for page in PAGES:
        page.write_text(_BLOCK.sub(lambda m: m.group(1) + block + m.group(3), page.read_text(encoding="utf-8")))


def main() -> None:
    """Run the sample's day and rewrite the pages' blocks with what it printed."""
    with tempfile.TemporaryDirectory() as out:
        write(text(run_demo(options(Path(out)))))
    print("rewrote the sample in " + ", ".join(str(page.relative_to(ROOT)) for page in PAGES))


if __name__ == "__main__":
    main()
