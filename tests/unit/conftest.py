"""Unit tests are pure: any attempt to open a network socket fails the test."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def guard(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unit tests must not open sockets; use the in-memory fakes")

    monkeypatch.setattr(socket.socket, "connect", guard)
