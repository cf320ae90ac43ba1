"""The four text sinks (Slack, email headers, HTML, CSV): each has one escaping function, and every writer uses it.

Issue 33's text attacks: a tag holding a newline and ``*bold*`` forged a line in a Slack message, the Stop-now answer's
fallback text was not escaped, a CR/LF in a tag made a finding's email fail on every retry, and CSV cells with a space
or newline before ``=`` or a full-width sign were not neutralised.
"""

from __future__ import annotations

import ast
import csv
import datetime as dt
import io
from email import message_from_bytes
from pathlib import Path

import pytest

from governor.adapters.ses import build_mime
from governor.domain.decision import Finding
from governor.domain.escape import csv_cell, email_header, html_text, slack_text
from governor.interactions.domain import ephemeral, updated_message
from governor.notifier.domain import MergedFinding
from governor.notifier.render import email_for, slack_messages

FORGED = "ml\n:white_check_mark: *Resolved by security* _ok_ ~gone~ `x` <!channel>"
LAMBDAS = Path(__file__).resolve().parents[2] / "lambdas" / "governor"


def _texts(value: object) -> list[str]:
    """Every string of a Slack payload (texts of every block, the fallback ``text``)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def test_slack_text_leaves_no_line_break_formatting_or_mention() -> None:
    shown = slack_text(FORGED)
    assert "\n" not in shown and "\r" not in slack_text("a\r\nb\u2028c\x85d")
    assert not any(ch in shown for ch in "*~`<>")
    assert "&lt;!channel&gt;" in shown and "_ok_" not in shown
    assert slack_text("gpu_fleet web_lb_1") == "gpu_fleet web_lb_1"  # no formatting inside a word: kept as written


def test_a_forged_line_in_a_tag_never_reaches_any_slack_text_of_a_finding() -> None:
    finding = Finding(
        id="f1",
        policy="idle",
        rule="idle.warned",
        severity="warning",
        title=f"Idle GPU instance i-0abc owned by {FORGED}",
        detail=f"team {FORGED}",
        resource="i-0abc",
        owner=FORGED,
        team=FORGED,
        at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
    )
    for message in slack_messages([MergedFinding(finding)]):
        for text in _texts(message):
            assert "\n:white_check_mark:" not in text and "*Resolved" not in text and "<!channel>" not in text


def test_the_stop_now_answer_and_ephemeral_replies_are_escaped_including_the_fallback_text() -> None:
    answer = updated_message([], "0" * 32, f"Stop now by {FORGED}")
    assert answer["text"] == answer["blocks"][-1]["elements"][0]["text"]
    for text in [*_texts(answer), *_texts(ephemeral(f"Not done: {FORGED}"))]:
        assert "\n" not in text and "*Resolved" not in text and "<!channel>" not in text


def test_a_crlf_in_a_tag_leaves_the_email_deliverable_with_one_subject_line() -> None:
    finding = Finding(
        id="f2",
        policy="keys",
        rule="keys.access-key",
        severity="warning",
        title="Access key of bob\r\nBcc: attacker@example.com is 400 days old",
        detail="d",
        resource="AKIA",
        at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
    )
    email = email_for([MergedFinding(finding)])
    raw = build_mime(
        sender="gov@corp.example", recipients=["sec@corp.example"], subject=email.subject, html="h", text="t"
    )
    parsed = message_from_bytes(raw)
    assert parsed["Bcc"] is None and "attacker@example.com" in parsed["Subject"]
    assert "\n" not in email_header("a\r\nb") and email_header("x" * 500).endswith("…")


def test_html_text_escapes_markup_and_both_quotes() -> None:
    assert html_text("<img src=x onerror='a'>\"") == "&lt;img src=x onerror=&#x27;a&#x27;&gt;&quot;"


@pytest.mark.parametrize(
    "cell",
    [
        "=1+1",
        "+1",
        "-1",
        "@SUM(A1)",
        "\t=1",
        "\r=1",
        ' =HYPERLINK("x")',
        "\n=1",
        "\u3000=1",
        "\uff1d1+1",
        "\uff0b1",
        "\uff0d1",
        "\uff20A1",
        "|calc",
        "\u200b=1",
    ],
    ids=[
        "eq",
        "plus",
        "minus",
        "at",
        "tab",
        "cr",
        "space",
        "newline",
        "ideographic-space",
        "fullwidth-eq",
        "fullwidth-plus",
        "fullwidth-minus",
        "fullwidth-at",
        "pipe",
        "zero-width-space",
    ],
)
def test_no_csv_cell_starts_a_formula(cell: str) -> None:
    buffer = io.StringIO()
    csv.writer(buffer).writerow([csv_cell(cell)])
    (read,) = next(csv.reader(io.StringIO(buffer.getvalue())))
    assert read.startswith("'")


def test_numbers_and_plain_text_stay_as_they_are_in_csv() -> None:
    assert csv_cell(-3) == -3 and csv_cell(1.5) == 1.5 and csv_cell("ana@corp.example") == "ana@corp.example"
    assert csv_cell("") == ""


def _calls(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            names.append(f"{node.func.value.id}.{node.func.attr}")
    return names


def test_every_sink_writer_in_the_runtime_uses_the_one_escape_of_its_sink() -> None:
    """No ``html.escape`` of its own, no hand-made ``&amp;`` replacement, no formula check outside ``escape.py``."""
    offenders = []
    for path in LAMBDAS.rglob("*.py"):
        if path.name == "escape.py":
            continue
        source = path.read_text(encoding="utf-8")
        if "html.escape" in _calls(ast.parse(source)) or '"&amp;"' in source or "_FORMULA_START" in source:
            offenders.append(str(path.relative_to(LAMBDAS)))
    assert offenders == []
