"""Reliability tests: the fault-injection hooks are installed before any client exists; a deployed governor on the
in-process emulator with the reliability policy (enforcement on)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

import governor_cli.testing.faults  # noqa: F401  (installs the botocore hooks before clients are created)
from governor_cli.testing.deployment import Deployment
from governor_cli.testing.faults import fake_slack
from governor_cli.testing.scenarios import soak_policy


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    # Slack answered in process: the scenarios include findings to deliver and report ticks.
    with mock_aws(config={"lambda": {"use_docker": False}}), fake_slack():
        deployed = Deployment(soak_policy())
        try:
            yield deployed
        finally:
            deployed.close()
