"""One escaping function per sink the governor writes text into: Slack mrkdwn, email headers, HTML, CSV, security
records (ASFF for Security Hub, OCSF for a lake or a log line) and the terminal (the ``governor`` command's output).

Tag values, CloudTrail strings and resource names are chosen by whoever can tag or make an API call, and they reach
people through these sinks. Every writer of a sink calls its function here and nothing else
(``tests/unit/test_escape.py`` walks the runtime for stray ``html.escape`` calls and hand-made escapes), so a sink is
fixed in one place when a new trick turns up.
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Any

# --- Slack mrkdwn ----------------------------------------------------------------------------------------------------

#: Every character that ends a line somewhere (Slack, browsers and mail clients break on all of them).
_LINE_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
#: The other C0 and C1 control characters, DEL included.
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
#: Slack has no escape for its formatting characters (only ``&``, ``<`` and ``>`` are entities), so a character that
#: could open or close *bold*, _italic_, ~strike~ or `code` is shown as a look-alike that formats nothing.
_LOOK_ALIKES = {"*": "\u2217", "~": "\u223c", "`": "\u02cb", "_": "\u02cd"}
#: ``_`` inside a word (``gpu_fleet``, ``web_lb_1``) formats nothing in Slack and stays as written.
_FORMATTING = re.compile(r"[*~`]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def slack_text(value: Any) -> str:
    """Text for any Slack text field (mrkdwn, plain_text, the fallback ``text``): shown, never acted on.

    ``&``, ``<`` and ``>`` become entities (no ``<!channel>``, no ``<https://evil|link>``), every line break and control
    character becomes a space (no forged line such as ":white_check_mark: *Resolved by security*"), and ``* _ ~ `` ``
    become look-alikes that format nothing. Callers add their own formatting around the escaped value.
    """
    text = _CONTROLS.sub(" ", _LINE_BREAKS.sub(" ", str(value)))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _FORMATTING.sub(lambda match: _LOOK_ALIKES[match.group()], text)


# --- email headers ---------------------------------------------------------------------------------------------------

#: RFC 5322's line limit is 998 characters; subjects are kept far shorter so clients show them whole.
MAX_HEADER_CHARS = 200


def email_header(value: Any, limit: int = MAX_HEADER_CHARS) -> str:
    """A header value on one line: a CR or LF in a tag would otherwise make the message unbuildable (Python's email
    package refuses it on every retry, so the finding is never delivered) or, in a laxer library, add a header."""
    text = _CONTROLS.sub(" ", _LINE_BREAKS.sub(" ", str(value))).replace("\t", " ")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- HTML -----------------------------------------------------------------------------------------------------------


def html_text(value: Any) -> str:
    """Text for an HTML element or a quoted attribute value: ``& < > " '`` as entities."""
    return html.escape(str(value), quote=True)


# --- CSV ------------------------------------------------------------------------------------------------------------

#: What a spreadsheet reads as the start of a formula, in ASCII and in the full-width forms Excel and LibreOffice also
#: accept (U+FF1D followed by ``1+1`` is a formula there), plus the pipe of old DDE payloads.
_FORMULA_SIGNS = frozenset("=+-@|\uff1d\uff0b\uff0d\uff20\uff5c")
#: Characters a spreadsheet skips before looking for a formula sign: every Unicode space, line break and tab.
_LEADING_SKIPPED = re.compile(r"^[\s\u200b\u200c\u200d\u2060\ufeff]+")


def csv_cell(value: Any) -> Any:
    """A CSV cell that no spreadsheet runs: OWASP's rule (a leading ``'`` before ``= + - @``, tab or CR) extended to the
    signs behind leading whitespace or line breaks and to full-width signs. Numbers and other non-text stay as they are.

    CloudTrail values (``userAgent``, ``errorMessage``, user names) are chosen by whoever made the call; a failed
    console login is enough to plant ``=HYPERLINK(...)`` in a file the security team opens.
    """
    if not isinstance(value, str) or not value:
        return value
    rest = _LEADING_SKIPPED.sub("", value)
    if value[0] in "\t\r\n" or (rest and rest[0] in _FORMULA_SIGNS):
        return "'" + value
    return value


# --- security records (ASFF, OCSF) -----------------------------------------------------------------------------------

#: Unicode's bidirectional controls: text shown in an order other than the one it is stored in ("Trojan Source"); a
#: terminal shows U+202E as reversing the rest of the line.
_BIDI_CHARS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_BIDI = re.compile(f"[{_BIDI_CHARS}]")


def record_text(value: Any, limit: int) -> str:
    """Text for a field of a security record (an ASFF finding in Security Hub, an OCSF event in a lake or a log line):
    one line, no control or bidirectional characters, within the field's limit.

    JSON escapes quotes by itself; what it keeps is a CR or LF in an owner tag that, in a label list or a log line read
    line by line, becomes a second, forged entry (``owner:mallory``), and a 300 KB detail in a field meant for a
    sentence. The limit is the field's own (ASFF: Title 256, Description 1,024, product field values 2,048).
    """
    text = _BIDI.sub("", _CONTROLS.sub(" ", _LINE_BREAKS.sub(" ", str(value)))).replace("\t", " ")
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


# --- terminal -------------------------------------------------------------------------------------------------------


def terminal_text(value: Any) -> str:
    """Text for one line on a terminal (``governor status``, ``explain``, ``idle``, ``dlq``, ``audit`` and errors):
    every control character (ESC included: no colour, cursor move, screen clear or title change), every character a
    terminal or ``str.splitlines`` breaks a line at, and every bidirectional override written as a visible escape
    (``\\x0a``, ``\\x1b``, ``\\u202e``), so a tag holding a newline cannot forge a row and U+202E cannot reverse what
    an operator reads. JSON and CSV output keep values exact (``json`` escapes them; CSV cells go through
    :func:`csv_cell`)."""
    return "".join(
        (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
        if char in _BIDI_CHARS or unicodedata.category(char) in {"Cc", "Zl", "Zp"}
        else char
        for char in str(value)
    )
