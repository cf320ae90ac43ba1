"""Start and stop moto's server on a loopback port, and point every boto3 client at it.

The demo and the end-to-end tests run the same handlers as Lambda; only ``AWS_ENDPOINT_URL`` differs.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

FAKE_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "demo",
    "AWS_SECRET_ACCESS_KEY": "demo",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
}


class EmulatorError(RuntimeError):
    """The emulator could not start (port taken, moto missing); the demo exits 2 with this message."""


@dataclass(frozen=True)
class Emulator:
    endpoint: str
    region: str = "us-east-1"


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise EmulatorError(
                f"port {port} on {host} is taken ({error.strerror}); pick another with --port"
            ) from None


@contextmanager
def running_emulator(port: int = 0, host: str = "127.0.0.1") -> Iterator[Emulator]:
    """A moto server for the duration of the block; the environment is restored and the server stopped after."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as error:
        raise EmulatorError(f"the local emulator needs moto[server] ({error})") from None
    if port:
        _check_port(host, port)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    try:
        server.start()
        bound_host, bound_port = server.get_host_and_port()
    except Exception as error:
        raise EmulatorError(f"the local emulator failed to start on {host}:{port}: {error}") from None
    endpoint = f"http://{bound_host}:{bound_port}"
    saved = {k: os.environ.get(k) for k in (*FAKE_ENVIRONMENT, "AWS_ENDPOINT_URL", "AWS_PROFILE")}
    os.environ.update(FAKE_ENVIRONMENT)
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    os.environ.pop("AWS_PROFILE", None)
    from governor.adapters import ec2
    from governor.adapters.aws import client

    client.cache_clear()
    ec2.WILDCARD_TYPE_FILTER = False
    try:
        yield Emulator(endpoint=endpoint)
    finally:
        ec2.WILDCARD_TYPE_FILTER = True
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        client.cache_clear()
