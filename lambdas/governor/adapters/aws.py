"""One place that creates boto3 clients: one Session per process, one client per (service, region, endpoint).

Every client shares the project's bounded standard retries and short timeouts. Building a boto3 Session loads
botocore's data loader, endpoint rules and credential chain; doing that once per adapter was most of the idle
function's first invocation (bench/README.md, section 2), so the whole runtime shares one Session and its clients.
Clients are thread-safe once built; the Session is not, so building one is serialised by a lock. boto3 and
botocore's ``Config`` are imported on the first client, not when an adapter module is imported: a handler's import
then costs less than boto3's alone, and the first invocation pays for boto3 once, together with its first client.

A client is built when it is first used, not when it is asked for: ``client("ssm", region)`` hands out a
:class:`LazyClient` that builds the real one (and loads its service model, most of a client's cost) on its first
attribute access. An adapter for a service an invocation never calls (SSM on a report-only sweep, SQS without a dead
letter) then costs nothing, and a function's first AWS request waits only for the clients it has used so far.

The CloudWatch client parses its answers with its own cheap parsers (``governor.adapters.cloudwatch_parsing``: a
sweep's GetMetricData answers hold hundreds of thousands of timestamps); every other service keeps botocore's.

``AWS_ENDPOINT_URL`` (read by botocore itself) points every client at the local emulator in the demo and e2e tests.

Organisation mode: ``client(service, region, account=...)`` for an account other than the function's own assumes the
function's spoke role there (``<spoke role>-<function>-<region>``) and returns a client on those credentials.
Credentials are cached per account and region until five minutes before they expire; the session is named after the
event that opened it.
Without organisation mode (the default), or for the function's own account, it is the shared client as before.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar, cast

from governor.domain.ports import ReadRefused

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

#: Error codes AWS services return when the caller's policies (identity, resource, SCP) refuse a call.
ACCESS_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})

ClientKey = tuple[str, str | None, str | None]

#: Assumed-role credentials are renewed this long before they expire, so no call starts on nearly dead credentials.
RENEW_BEFORE = dt.timedelta(minutes=5)
#: STS's RoleSessionName: 2 to 64 characters of ``[\w+=,.@-]``.
_SESSION_NAME_REFUSED = re.compile(r"[^\w+=,.@-]", re.ASCII)


def session_name(event_id: str | None) -> str:
    """A valid RoleSessionName from an event id (anything STS refuses becomes '-'), so CloudTrail names the event."""
    name = "governor-" + _SESSION_NAME_REFUSED.sub("-", event_id or "session")
    return name[:64]


def partition_of(region: str | None) -> str:
    """The ARN partition a region belongs to (the spoke role's ARN is built in the target's partition)."""
    if region and region.startswith("cn-"):
        return "aws-cn"
    if region and region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


class Organization:
    """What the runtime needs to act in a member account: the spoke roles' name, the function's own account, and
    which function it is (each capability has its own spoke role, holding only that capability's grants)."""

    def __init__(
        self, spoke_role: str, home_account: str | None, function: str, home_region: str | None = None
    ) -> None:
        self.spoke_role = spoke_role
        self.home_account = home_account
        self.function = function
        self.home_region = home_region

    def is_spoke(self, account: str, region: str | None) -> bool:
        """Acting in ``account`` and ``region`` needs the spoke role: another account, or the hub account's own other
        regions (the hub's roles are granted in its own region only; the StackSet's second group puts the spoke roles
        into the hub account's other regions, see infra.constructs.hub_regions)."""
        if account != self.home_account:
            return True
        return bool(region and self.home_region and region != self.home_region)

    def role_arn(self, account: str, region: str | None) -> str:
        return (
            f"arn:{partition_of(region)}:iam::{account}:role/{spoke_role_name(self.spoke_role, self.function, region)}"
        )


def spoke_role_name(prefix: str, function: str, region: str | None) -> str:
    """``<prefix>-<function>-<region>``: one role per capability per region (IAM names are global), in every member
    account; the hub's infrastructure names it the same way (``infra.settings.OrganizationSettings.spoke_role``)."""
    return f"{prefix}-{function}-{region}"


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


def _config(single_attempt: bool) -> Any:
    """The shared retry configuration, or one attempt only (botocore never resends the call)."""
    config = retries()
    if single_attempt:
        from botocore.config import Config

        config = config.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
    return config


class LazyClient:
    """A shared client, built from the shared Session on its first attribute access; the same object afterwards."""

    __slots__ = ("_build", "_built", "service")

    def __init__(self, service: str, build: Callable[[], Any]) -> None:
        self.service = service
        self._build = build
        self._built: Any = None

    @property
    def built(self) -> bool:
        """Whether the real client exists (its service model loaded)."""
        return self._built is not None

    def __getattr__(self, name: str) -> Any:
        real = self._built
        if real is None:
            made = self._build()  # serialised by the cache's lock; a thread that lost the race drops its copy
            real = self._built = self._built or made
        return getattr(real, name)

    def __repr__(self) -> str:
        return f"LazyClient({self.service!r}, built={self.built})"


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
        self.organization: Organization | None = None
        # (account, region) -> (credentials, expiry); (service, region, endpoint, account) -> (client, expiry)
        self._credentials: dict[tuple[str, str | None], tuple[dict[str, Any], dt.datetime]] = {}
        self._foreign: dict[tuple[str, str | None, str | None, str], tuple[Any, dt.datetime]] = {}
        self.roles_assumed = 0
        self._dependents: list[Callable[[], None]] = []

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

    def configure(self, organization: Organization | None) -> None:
        """Switch organisation mode on (the runner does, from the function's environment) or off (``None``)."""
        with self._lock:
            self.organization = organization
            self._credentials.clear()
            self._foreign.clear()

    def is_member(self, account: str | None, region: str | None = None) -> bool:
        """Organisation mode is on and acting in ``account`` (and ``region``) needs the spoke role: another account than
        the function's own, or the function's own account in another region."""
        organization = self.organization
        return bool(account) and organization is not None and organization.is_spoke(str(account), region)

    def __call__(
        self,
        service: str,
        region: str | None = None,
        endpoint_url: str | None = None,
        *,
        single_attempt: bool = False,
        account: str | None = None,
        event_id: str | None = None,
    ) -> Any:
        """A cached client per (service, region, endpoint); built from the shared Session on first use.

        ``single_attempt`` gives a client that never retries (for a call without a client token, such as SSM
        ``SendCommand``: botocore would resend it after a read timeout although AWS may have executed it).
        With ``account`` another account than the function's own (or the own account in another region than the
        function's) and organisation mode on, a client on the spoke role's credentials in that account and region.
        """
        organization = self.organization
        if account and organization is not None and self.is_member(account, region):
            return self._member_client(organization, service, region, endpoint_url, account, event_id, single_attempt)
        key = (f"{service}#once" if single_attempt else service, region, endpoint_url)
        found = self._clients.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = LazyClient(service, lambda: self._build(service, region, endpoint_url, single_attempt))
                self._clients[key] = found
            return found

    def _build(self, service: str, region: str | None, endpoint_url: str | None, single_attempt: bool) -> Any:
        from governor.adapters.cloudwatch_parsing import build_client  # imports botocore: with the first client

        with self._lock:
            return build_client(
                self._session_locked(),
                service,
                region_name=region,
                endpoint_url=endpoint_url,
                config=_config(single_attempt),
            )

    def _member_client(
        self,
        organization: Organization,
        service: str,
        region: str | None,
        endpoint_url: str | None,
        account: str,
        event_id: str | None,
        single_attempt: bool = False,
    ) -> Any:
        now = dt.datetime.now(dt.UTC)
        key = (f"{service}#once" if single_attempt else service, region, endpoint_url, account)
        found = self._foreign.get(key)
        if found is not None and found[1] - RENEW_BEFORE > now:
            return found[0]
        credentials, expiry = self._assumed(organization, account, region, endpoint_url, event_id, now)
        from governor.adapters.cloudwatch_parsing import build_client

        with self._lock:
            built = build_client(
                self._session_locked(),
                service,
                region_name=region,
                endpoint_url=endpoint_url,
                config=_config(single_attempt),
                aws_access_key_id=credentials["AccessKeyId"],
                aws_secret_access_key=credentials["SecretAccessKey"],
                aws_session_token=credentials["SessionToken"],
            )
            self._foreign[key] = (built, expiry)
        return built

    def credentials(self, account: str, region: str | None, event_id: str | None = None) -> Any:
        """The spoke role's credentials in a member account and region (``botocore``'s read-only triple), for what
        signs its own requests (Amazon Managed Prometheus' SigV4); the function's own outside organisation mode."""
        from botocore.credentials import ReadOnlyCredentials

        organization = self.organization
        if organization is None or not self.is_member(account, region):
            found = self.session().get_credentials()
            if found is None:
                raise RuntimeError("no AWS credentials")
            return found.get_frozen_credentials()
        assumed, _ = self._assumed(organization, account, region, None, event_id, dt.datetime.now(dt.UTC))
        return ReadOnlyCredentials(assumed["AccessKeyId"], assumed["SecretAccessKey"], assumed["SessionToken"])

    def _assumed(
        self,
        organization: Organization,
        account: str,
        region: str | None,
        endpoint_url: str | None,
        event_id: str | None,
        now: dt.datetime,
    ) -> tuple[dict[str, Any], dt.datetime]:
        """The spoke role's credentials in one account and region, assumed once and reused until near expiry."""
        cached = self._credentials.get((account, region))
        if cached is not None and cached[1] - RENEW_BEFORE > now:
            return cached
        answer = self("sts", region, endpoint_url).assume_role(
            RoleArn=organization.role_arn(account, region), RoleSessionName=session_name(event_id)
        )
        credentials: dict[str, Any] = answer["Credentials"]
        expiry = credentials["Expiration"]
        if isinstance(expiry, str):
            expiry = dt.datetime.fromisoformat(expiry)
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=dt.UTC)
        with self._lock:
            self._credentials[(account, region)] = (credentials, expiry)
            self.roles_assumed += 1
        return credentials, expiry

    def cache_clear(self) -> None:
        """Forget the Session and every client (the next call builds them again), and every adapter cached on them
        (:func:`per_session`), so nothing keeps a client of a Session that is gone."""
        with self._lock:
            self._session = None
            self._clients.clear()
            self._credentials.clear()
            self._foreign.clear()
            dependents = list(self._dependents)
        for clear in dependents:
            clear()

    def on_clear(self, clear: Callable[[], None]) -> None:
        """Call ``clear`` whenever the clients are forgotten."""
        with self._lock:
            self._dependents.append(clear)


client = ClientCache()

F = TypeVar("F", bound=Callable[..., Any])


def per_session(build: F) -> F:
    """Cache what ``build`` makes from the shared clients (a handler's adapters) per arguments, for as long as those
    clients live: :meth:`ClientCache.cache_clear` clears it too. In Lambda that is the container's life; in tests and
    the demo it means adapters never outlive the emulator their clients were built on."""
    cached = cache(build)
    client.on_clear(cached.cache_clear)
    return cast(F, cached)


def member_target(event: Any) -> tuple[str, str | None, str | None] | None:
    """``(account, region, event id)`` of a raw EventBridge event from a member account (or from the hub account's other
    regions) in organisation mode, else
    ``None`` (act with the shared clients, as a single-account deployment does).

    EventBridge sets ``account`` and ``region`` to where the event happened, also on events forwarded from a spoke;
    no sender chooses them. Anything that is not a 12-digit account id counts as no account.
    """
    if not isinstance(event, dict):
        return None
    account, region, event_id = (event.get(key) for key in ("account", "region", "id"))
    region = region if isinstance(region, str) and region else None
    if not (isinstance(account, str) and account.isdigit() and len(account) == 12):
        return None
    if not client.is_member(account, region):
        return None
    return account, region, event_id if isinstance(event_id, str) else None


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
