"""How the report words a count and a sentence: shared by the sections (notes, resolutions) and the renderings."""

from __future__ import annotations


def plural(count: int, word: str, plural: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,204 interruptions``."""
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"


def sentence(text: str) -> str:
    """The text stripped, with a capital first letter."""
    text = text.strip()
    return (text[:1].upper() + text[1:]) if text else text
