"""cfn-lint over synthesized templates, with the errors this design answers differently acknowledged in infra/nag.py.

cfn-lint runs as its console script does (``cfnlint.runner.main``): ``python -m cfnlint`` has no ``__main__`` and
exits 1 without linting anything, which an exit-code check of "no errors" took for a pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from infra.nag import CFN_LINT_ACKNOWLEDGED

_RUN = "import sys; from cfnlint.runner import main; sys.exit(main())"


def lint(templates: list[Path]) -> list[dict[str, Any]]:
    """Every finding cfn-lint reports for ``templates`` (one run for all of them)."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN, "--format", "json", *map(str, templates)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode & 1 == 0, done.stderr[-2000:]  # 1: cfn-lint itself failed; 2, 4, 8: errors, warnings, info
    findings: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    return findings


def acknowledged(finding: dict[str, Any]) -> bool:
    """An error infra/nag.py answers, with its reason, on a resource it names."""
    entry = CFN_LINT_ACKNOWLEDGED.get(finding["Rule"]["Id"])
    path = finding["Location"]["Path"]
    logical_id = path[1] if len(path) > 1 and path[0] == "Resources" else ""
    return entry is not None and bool(entry[1]) and str(logical_id).startswith(entry[0])


def open_errors(findings: list[dict[str, Any]]) -> list[str]:
    """The errors no acknowledgement answers, one line each (warnings are cfn-lint's advice, not failures)."""
    return [
        f"{f['Rule']['Id']} {f['Filename']}:{'/'.join(map(str, f['Location']['Path']))}: {f['Message']}"
        for f in findings
        if f["Level"] == "Error" and not acknowledged(f)
    ]
