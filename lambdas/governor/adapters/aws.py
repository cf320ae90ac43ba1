"""One place that creates boto3 clients: bounded standard retries and short timeouts for every call.

``AWS_ENDPOINT_URL`` (read by botocore itself) points every client at the local emulator in the demo and e2e tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from governor.domain.ports import ReadRefused

#: Error codes AWS services return when the caller's policies (identity, resource, SCP) refuse a call.
ACCESS_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})

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


@contextmanager
def refused_reads(resource: str) -> Iterator[None]:
    """Turn an access-denied read into :class:`ReadRefused` so the caller can go on with the next resource."""
    try:
        yield
    except ClientError as error:
        details = error.response.get("Error", {})
        code = str(details.get("Code", ""))
        if code in ACCESS_DENIED:
            raise ReadRefused(resource, code, str(details.get("Message", ""))) from error
        raise
