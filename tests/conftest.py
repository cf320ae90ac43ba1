"""Shared test set-up: no real AWS credentials, no real network, the repository's paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

ROOT = Path(__file__).resolve().parent.parent
# Real CloudTrail records (MIT, invictus-ir/aws_dataset), kept in the repository: see PROVENANCE.md beside them.
CLOUDTRAIL_DIR = ROOT / "tests" / "fixtures" / "cloudtrail" / "invictus-aws-dataset"

#: Hypothesis in `make test` and CI: the same examples on every run (``derandomize``: seeded from each test, so a
#: landing is never a lottery), no deadline and no ``too_slow`` check (timings on a loaded 2-core runner decide
#: nothing), and on a failure the example and its ``@reproduce_failure`` blob printed. Hypothesis refuses a database
#: with ``derandomize``: an input found by exploration is pinned in its test with ``@example`` instead.
settings.register_profile(
    "ci", derandomize=True, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
#: Exploration, outside CI (``make explore``, or ``GOVERNOR_HYPOTHESIS_PROFILE=exploration``): random seeds, and the
#: example database kept in .hypothesis/examples, so a failure found once is replayed first on the next run.
settings.register_profile(
    "exploration",
    # Said explicitly: with CI set in the environment Hypothesis's own default is derandomized, and a profile
    # inherits the default.
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
    database=DirectoryBasedExampleDatabase(ROOT / ".hypothesis" / "examples"),
)
settings.load_profile(os.environ.get("GOVERNOR_HYPOTHESIS_PROFILE", "ci"))

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "20,22")


@pytest.fixture(autouse=True)
def _fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach a real account: fake credentials and a fixed region."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
