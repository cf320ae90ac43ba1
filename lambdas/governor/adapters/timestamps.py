"""A cheap response timestamp parser for the CloudWatch client, where a sweep parses hundreds of thousands of them.

botocore's default parser (``botocore.utils.parse_timestamp``) builds each timestamp with a ``dateutil`` time zone:
an epoch number (the pinned botocore speaks Smithy RPC v2 CBOR to CloudWatch, whose timestamps are CBOR tag 1 epoch
seconds; the JSON protocol sends epoch numbers too) becomes ``datetime.fromtimestamp(value, tzlocal())``, and an
ISO-8601 string (the query protocol) goes through ``dateutil.parser.parse``. A 1,000-instance sweep's GetMetricData
answers hold about 220,000 timestamps, and those two paths were most of the sweep's CPU (bench/README.md, section 1).

:func:`utc_timestamp` gives the same instants as aware UTC datetimes through the standard library's C paths
(``datetime.fromtimestamp(value, UTC)``, ``datetime.fromisoformat``), and hands anything else (RFC 822 dates, naive
ISO strings, epochs outside the platform's range) to botocore's own parser, so no answer parses differently.

It is scoped by service (:data:`PARSER_DEFAULTS`, applied by ``governor.adapters.aws`` when it builds a client):
every other service keeps botocore's parsing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

_UTC = dt.UTC
_from_epoch = dt.datetime.fromtimestamp
_from_iso = dt.datetime.fromisoformat


def utc_timestamp(value: Any) -> Any:
    """``value`` (epoch seconds or an ISO-8601 string with an offset) as an aware UTC datetime; anything else as
    botocore parses it."""
    kind = type(value)
    try:
        if kind is float or kind is int:
            return _from_epoch(value, _UTC)
        if kind is str:
            parsed = _from_iso(value)
            if parsed.tzinfo is not None:
                return parsed.astimezone(_UTC)
    except (ValueError, OverflowError, OSError):
        pass
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)


#: service -> the ``ResponseParserFactory`` defaults its clients are built with (every other service: botocore's).
PARSER_DEFAULTS: dict[str, dict[str, Any]] = {"cloudwatch": {"timestamp_parser": utc_timestamp}}


def build_client(session: Any, service: str, **kwargs: Any) -> Any:
    """``session.client(service, **kwargs)`` (a boto3 Session), parsing responses with the service's
    :data:`PARSER_DEFAULTS`.

    botocore reads the ``response_parser_factory`` component of the Session when it creates a client and keeps it in
    the client's endpoint, so the service's own factory is registered for that one creation and the shared one put
    back after: the Session's other clients, built before or after, keep botocore's parsers. Callers serialise
    client creation on a Session (``governor.adapters.aws.ClientCache`` builds under its lock).
    """
    defaults = PARSER_DEFAULTS.get(service)
    if not defaults:
        return session.client(service, **kwargs)
    from botocore.parsers import ResponseParserFactory

    core = session._session  # boto3's Session keeps its botocore Session here (no public accessor)
    own = ResponseParserFactory()
    own.set_parser_defaults(**defaults)
    shared = core.get_component("response_parser_factory")
    core.register_component("response_parser_factory", own)
    try:
        return session.client(service, **kwargs)
    finally:
        core.register_component("response_parser_factory", shared)
