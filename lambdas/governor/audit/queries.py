"""The query library: ``governor/audit/sql/*.sql`` files (``queries/`` at the top of the repository links to them),
their headers and their ``:name`` parameters.

The SQL files are the single source for every engine: the report function runs them on Athena as they shipped with its
code, the stack deploys them as named queries for the console, the local engine translates them. They live inside the
runtime package so the report never has to read SQL back from the workgroup, where anyone with
``athena:CreateNamedQuery`` or ``athena:UpdateNamedQuery`` could have planted or changed it (docs/security.md,
boundary 14). Parameters are only ever validated ISO 8601 timestamps, re-rendered by us before they reach either engine.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

#: The library, shipped in the code asset and the package (``[tool.setuptools.package-data]``).
QUERIES_DIR = Path(__file__).resolve().parent / "sql"
REQUIRED_PARAMETERS = ("start", "end")
_HEADER = re.compile(r"^--\s*(name|purpose|cis|parameters)\s*:\s*(.*?)\s*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class QueryError(ValueError):
    """A query file, query name or parameter that cannot be used; the message names it."""


@dataclass(frozen=True)
class QuerySpec:
    """One query file: its name, what it is for, the CIS AWS Foundations item it backs (if any), its SQL."""

    name: str
    purpose: str
    cis: str | None
    parameters: tuple[str, ...]
    sql: str
    path: Path


def scan_parameters(sql: str) -> list[tuple[int, int, str]]:
    """``(start, end, name)`` of every ``:name`` placeholder outside strings, quoted identifiers and comments."""
    found: list[tuple[int, int, str]] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in ("'", '"'):
            close = i + 1
            while close < n:
                if sql[close] == c:
                    if close + 1 < n and sql[close + 1] == c:
                        close += 2
                        continue
                    break
                close += 1
            i = close + 1
        elif sql.startswith("--", i):
            newline = sql.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            i = n if close < 0 else close + 2
        elif c == ":" and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_") and (i == 0 or sql[i - 1] != ":"):
            match = re.match(r"[A-Za-z_][A-Za-z0-9_]*", sql[i + 1 :])
            assert match is not None
            found.append((i, i + 1 + match.end(), match.group(0)))
            i += 1 + match.end()
        else:
            i += 1
    return found


def to_positional(sql: str) -> tuple[str, list[str]]:
    """Athena's prepared-statement form: every ``:name`` becomes ``?``; returns the names in order of occurrence."""
    pieces: list[str] = []
    names: list[str] = []
    last = 0
    for start, end, name in scan_parameters(sql):
        pieces.append(sql[last:start])
        pieces.append("?")
        names.append(name)
        last = end
    pieces.append(sql[last:])
    return "".join(pieces), names


#: First line of a deployed named query: the order of its ``?`` execution parameters.
ORDER_LINE = "-- execution parameters, in order: "
_ORDER = re.compile(r"^-- execution parameters, in order: (.*)$", re.MULTILINE)


def console_form(sql: str) -> str:
    """The query as deployed to Athena: ``?`` placeholders (the console prompts for them), their order on top.

    ``:start`` / ``:end`` are our notation; Athena runs only ``?`` execution parameters, so a named query holding
    ``:start`` could not run in the console as it is.
    """
    statement, names = to_positional(sql)
    if not names:
        return sql
    order = ", ".join(f":{name}" for name in names)
    hint = "-- in the Athena console enter each value quoted, e.g. '2026-01-05T00:00:00Z' (end exclusive)"
    return f"{ORDER_LINE}{order}\n{hint}\n{statement}"


def positional(sql: str) -> tuple[str, list[str]]:
    """``(statement, parameter names in order)`` for either form: our ``:name`` SQL or a deployed named query."""
    statement, names = to_positional(sql)
    if names:
        return statement, names
    match = _ORDER.search(sql)
    if match is None:
        return sql, []
    return sql, [part.strip().lstrip(":") for part in match.group(1).split(",") if part.strip()]


def parse_query(path: Path) -> QuerySpec:
    """Read one ``.sql`` file and check its header against its body."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise QueryError(f"{path}: cannot read the query ({error.__class__.__name__})") from None
    header: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("--"):
            if line.strip():
                break
            continue
        match = _HEADER.match(line)
        if match:
            header[match.group(1)] = match.group(2)
    for key in ("name", "purpose", "parameters"):
        if not header.get(key):
            raise QueryError(f"{path}: the header comment has no '-- {key}:' line")
    name = header["name"]
    if name != path.stem or not _NAME.match(name):
        raise QueryError(f"{path}: header name '{name}' must equal the file name and be lower_snake_case")
    declared = tuple(dict.fromkeys(re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", header["parameters"])))
    used = {found[2] for found in scan_parameters(text)}
    if set(declared) != used or not set(REQUIRED_PARAMETERS) <= used:
        raise QueryError(
            f"{path}: declares parameters {sorted(declared)} but uses {sorted(used)}; every query takes :start and :end"
        )
    cis = header.get("cis")
    return QuerySpec(
        name=name,
        purpose=header["purpose"],
        cis=None if not cis or cis.lower() in ("none", "-", "n/a") else cis,
        parameters=declared,
        sql=text,
        path=path,
    )


def list_queries(queries_dir: Path | None = None) -> list[QuerySpec]:
    """Every query in the library, sorted by name."""
    folder = queries_dir or QUERIES_DIR
    files = sorted(folder.glob("*.sql"))
    if not files:
        raise QueryError(f"{folder}: no .sql query files found")
    return [parse_query(path) for path in files]


def select_queries(specs: list[QuerySpec], names: list[str] | None) -> list[QuerySpec]:
    """The named queries in the order asked for (all when ``names`` is empty); unknown names are an error."""
    if not names:
        return specs
    by_name = {spec.name: spec for spec in specs}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise QueryError(f"unknown query {', '.join(unknown)}; known: {', '.join(sorted(by_name))}")
    return [by_name[name] for name in dict.fromkeys(names)]


def parse_time(value: str | dt.datetime) -> dt.datetime:
    """An aware UTC datetime from ISO 8601 text (``2024-05-01``, ``2024-05-01T10:00:00Z``, with an offset)."""
    if isinstance(value, dt.datetime):
        moment = value
    else:
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            raise QueryError(f"'{value}' is not an ISO 8601 time (e.g. 2024-05-01T00:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def iso(moment: dt.datetime) -> str:
    """The one text form parameters take: ``YYYY-MM-DDTHH:MM:SSZ`` (what CloudTrail writes in ``eventTime``)."""
    return parse_time(moment).strftime("%Y-%m-%dT%H:%M:%SZ")
