"""One place that creates boto3 clients: bounded standard retries and short timeouts for every call.

``AWS_ENDPOINT_URL`` (read by botocore itself) points every client at the local emulator in the demo and e2e tests.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import boto3
from botocore.config import Config

RETRIES = Config(
    retries={"mode": "standard", "max_attempts": 4},
    connect_timeout=3,
    read_timeout=15,
    user_agent_extra="gpu-fleet-governor",
)


@lru_cache(maxsize=64)
def client(service: str, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """A cached client per (service, region, endpoint); clients are thread-safe and costly to build."""
    return boto3.session.Session().client(service, region_name=region, endpoint_url=endpoint_url, config=RETRIES)
