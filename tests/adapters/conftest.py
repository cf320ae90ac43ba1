"""Fixtures shared by the adapter tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from governor_cli.testing.dcgm import PrometheusServer


@pytest.fixture
def prometheus() -> Iterator[tuple[PrometheusServer, str]]:
    """A Prometheus-compatible query API on the loopback interface (``governor_cli.testing.dcgm``), and its URL."""
    server = PrometheusServer()
    url = server.start()
    yield server, url
    server.stop()
