"""``python -m governor_cli.audit_translations --write-translations``: refresh the audit engine's ``translated.json``
after editing a query file (kept out of the runtime package: the Lambda asset holds no ``__main__``)."""

from __future__ import annotations

import argparse
import json

from governor.audit.engine import TRANSLATIONS, translations


def main(argv: list[str] | None = None) -> int:
    """Translate the query library to DuckDB SQL ahead of time, so an audit run does not load sqlglot."""
    parser = argparse.ArgumentParser(description="Translate the query library to DuckDB SQL ahead of time.")
    parser.add_argument("--write-translations", action="store_true", required=True)
    parser.parse_args(argv)
    TRANSLATIONS.write_text(json.dumps(translations(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {TRANSLATIONS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
