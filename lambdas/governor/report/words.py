"""How the report words a count and a sentence: shared by the sections (notes, resolutions) and the renderings."""

from __future__ import annotations


def plural(count: int, word: str, plural: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,204 interruptions``."""
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"


def sentence(text: str) -> str:
    """The text stripped, with a capital first letter."""
    text = text.strip()
    return (text[:1].upper() + text[1:]) if text else text


def coverage_text(savings_plans_pct: float | None, reserved_pct: float | None, source: str | None) -> str | None:
    """The GPU fleet's commitment coverage in one phrase (report HTML, Slack, email text), None without figures."""
    if source is None or (savings_plans_pct is None and reserved_pct is None):
        return None

    def pct(value: float | None, what: str) -> str:
        return f"{value:.1f}% of {what}" if value is not None else f"no GPU {what}"

    return (
        f"Savings Plans covered {pct(savings_plans_pct, 'GPU spend')}, Reserved Instances "
        f"{pct(reserved_pct, 'GPU running hours')} ({source})"
    )
