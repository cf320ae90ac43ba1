"""One place that creates boto3 clients: one Session per process, one client per (service, region, endpoint).

Every client shares the project's bounded standard retries and short timeouts. Building a boto3 Session loads
botocore's data loader, endpoint rules and credential chain; doing that once per adapter was most of the idle
function's first invocation (bench/README.md, section 2), so the whole runtime shares one Session and its clients.
Clients are thread-safe once built; the Session is not, so building one is serialised by a lock. boto3 and
botocore's ``Config`` are imported on the first client, not when an adapter module is imported: a handler's import
then costs less than boto3's alone, and the first invocation pays for boto3 once, together with its first client.

``AWS_ENDPOINT_URL`` (read by botocore itself) points every client at the local emulator in the demo and e2e tests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

from governor.domain.ports import ReadRefused

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

#: Error codes AWS services return when the caller's policies (identity, resource, SCP) refuse a call.
ACCESS_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})

ClientKey = tuple[str, str | None, str | None]


@cache
def retries() -> Config:
    """Bounded standard retries and short timeouts, shared by every client (built with the first one)."""
    from botocore.config import Config

    return Config(
        retries={"mode": "standard", "max_attempts": 4},
        connect_timeout=3,
        read_timeout=15,
        user_agent_extra="gpu-fleet-governor",
    )


def __getattr__(name: str) -> Any:
    """``RETRIES`` stays importable by name, built only when someone asks for it (PEP 562)."""
    if name == "RETRIES":
        return retries()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ClientCache:
    """The process's shared Session and its clients; ``cache_clear`` drops both.

    Tests clear it when they change what a new Session would pick up (an emulator's botocore hooks are registered
    on a Session when it is created), and the next call builds a fresh Session.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._clients: dict[ClientKey, Any] = {}
        self.sessions_created = 0

    def session(self) -> boto3.session.Session:
        """The one Session every adapter's client comes from."""
        with self._lock:
            return self._session_locked()

    def _session_locked(self) -> boto3.session.Session:
        if self._session is None:
            import boto3

            self._session = boto3.session.Session()
            self.sessions_created += 1
        return self._session

    def __call__(
        self, service: str, region: str | None = None, endpoint_url: str | None = None, *, single_attempt: bool = False
    ) -> Any:
        """A cached client per (service, region, endpoint); built from the shared Session on first use.

        ``single_attempt`` gives a client that never retries (for a call without a client token, such as SSM
        ``SendCommand``: botocore would resend it after a read timeout although AWS may have executed it).
        """
        key = (f"{service}#once" if single_attempt else service, region, endpoint_url)
        found = self._clients.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                config = retries()
                if single_attempt:
                    from botocore.config import Config

                    config = config.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
                found = self._session_locked().client(
                    service, region_name=region, endpoint_url=endpoint_url, config=config
                )
                self._clients[key] = found
            return found

    def cache_clear(self) -> None:
        """Forget the Session and every client (the next call builds them again)."""
        with self._lock:
            self._session = None
            self._clients.clear()


client = ClientCache()


def session() -> boto3.session.Session:
    """The runtime's shared boto3 Session (for libraries that take one, e.g. Powertools' persistence layers)."""
    return client.session()


@contextmanager
def refused_reads(resource: str) -> Iterator[None]:
    """Turn an access-denied read into :class:`ReadRefused` so the caller can go on with the next resource."""
    from botocore.exceptions import ClientError

    try:
        yield
    except ClientError as error:
        details = error.response.get("Error", {})
        code = str(details.get("Code", ""))
        if code in ACCESS_DENIED:
            raise ReadRefused(resource, code, str(details.get("Message", ""))) from error
        raise
