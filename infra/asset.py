"""What the Lambda code asset ships: ``lambdas/`` as ``Code.from_asset`` packages it, minus what no function runs.

One declaration, shared by the function construct (``exclude=ASSET_EXCLUDES``), the asset test
(``tests/infra/test_code_asset.py``, which checks this list against the asset CDK synthesizes, every shipped module
against what the handlers import and every other shipped file against ``RUNTIME_DATA``) and the cold-start
benchmark's staged copy of the asset.

``NOT_RUNTIME`` names the modules that live in the runtime package by design, beside the code they serve, yet no
handler imports: each entry is a glob (CDK's: a pattern without ``/`` matches a file or folder name at any depth) and
the reason it stays out. Tooling with no place in the runtime package (test fakes, the DLQ operator, the demo and
simulator) lives in ``cli/governor_cli`` instead and never reaches ``lambdas/``.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from infra.settings import LAMBDAS_DIR

#: Build leftovers: bytecode, the requirements file the layer is built from, packaging metadata.
BUILD_EXCLUDES = ("**/__pycache__", "**/*.pyc", "requirements.txt", "*.egg-info")
#: Runtime-package modules that are not runtime code, and why.
NOT_RUNTIME = {
    "explain.py": "governor explain's explainers (each capability's explain module), their registrations "
    "(governor/domain/explain.py) and its entry (governor/explain.py): the CLI explains, no function does",
    "governor/audit/engine.py": "the local DuckDB engine of governor audit and governor report; in the cloud Athena "
    "runs the same query library, and DuckDB is not in the layer",
    "governor/audit/translated.json": "the local engine's DuckDB translation of the query library (37 KB)",
    "governor/audit/schema.py": "the CloudTrail table's columns: the audit construct's Glue table (synth) and the "
    "local engine read them; Athena's queries name the columns themselves",
}
ASSET_EXCLUDES = [*BUILD_EXCLUDES, *NOT_RUNTIME]
#: The only files besides modules the asset ships (globs under ``lambdas/``), and why: each is also package data in
#: pyproject.toml, so an installed ``governor`` holds them too.
RUNTIME_DATA = {
    "governor/audit/sql/*.sql": "the query library: the report runs it on Athena exactly as it shipped with its code, "
    "never SQL read back from the workgroup (docs/security.md, boundary 14)",
}


def excluded(relative: str) -> bool:
    """Whether CDK leaves the file at ``relative`` (a POSIX path under ``lambdas/``) out of the asset: a pattern matches
    the whole path, or (``**/`` dropped) any one of its folder or file names."""
    parts = relative.split("/")
    for pattern in ASSET_EXCLUDES:
        bare = pattern.removeprefix("**/")
        if fnmatch.fnmatchcase(relative, pattern) or any(fnmatch.fnmatchcase(part, bare) for part in parts):
            return True
    return False


def asset_files(root: Path = LAMBDAS_DIR) -> list[Path]:
    """The files of the code asset, in path order."""
    return sorted(f for f in root.rglob("*") if f.is_file() and not excluded(f.relative_to(root).as_posix()))
