"""Cheap response parsing for the CloudWatch client, whose GetMetricData answers hold hundreds of thousands of points,
and for the EC2 client, whose DescribeInstances answers hold three timestamps per instance.

A 1,000-instance sweep's answers hold about 220,000 timestamps and as many values, and botocore's parsing of them was
most of the sweep's CPU (bench/README.md, section 1). Two costs, both per point:

* the timestamp: the pinned botocore (1.44) resolves CloudWatch's protocols (``smithy-rpc-v2-cbor``, ``json``,
  ``query`` in its service model) to ``json``, whose timestamps are epoch numbers, and its default parser
  (``botocore.utils.parse_timestamp``) makes each one ``datetime.fromtimestamp(value, dateutil.tz.tzlocal())``
  (an ISO-8601 string, under the query protocol, goes through ``dateutil.parser.parse``). :func:`utc_timestamp` gives
  the same instants as aware UTC datetimes through the standard library's C paths, and hands anything else (RFC 822
  dates, naive ISO strings, epochs outside the platform's range) to botocore's own parser;
* the shape walk: botocore parses a list member by member, two Python calls each (``_parse_shape`` looks the handler
  up by name, the handler returns the value). :class:`JsonListsAtOnce` parses a list of scalars the JSON protocol
  hands back as they are (doubles, integers, strings: no handler of their own) in one step, and a list of timestamps
  with one comprehension; every other shape as botocore does.

The CloudWatch client gets both; the EC2 client the timestamp parser alone (its answers are XML, whose walk stays
botocore's). Both are scoped to those two clients (:data:`PARSERS`, applied by ``governor.adapters.aws`` when it builds
a client through :func:`build_client`): every other service keeps botocore's parsing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from botocore.parsers import PROTOCOL_PARSERS, JSONParser, ResponseParserFactory

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


class JsonListsAtOnce(JSONParser):
    """botocore's JSON protocol parser, but a list of scalars is parsed in one step instead of member by member."""

    def _handle_list(self, shape: Any, node: Any) -> Any:
        kind = shape.member.type_name
        if kind == "timestamp":
            parse = self._timestamp_parser
            return [None if item is None else parse(item) for item in node]
        if not hasattr(self, f"_handle_{kind}"):  # botocore's ``_default_handle``: the value as JSON decoded it
            return list(node)
        return super()._handle_list(shape, node)


class UtcTimestampParsers(ResponseParserFactory):
    """botocore's parser for every protocol, with :func:`utc_timestamp`: the EC2 client's (its ``ec2`` protocol is
    XML, whose timestamps are ISO-8601 strings that botocore hands to ``dateutil.parser.parse``; a 1,000-instance
    DescribeInstances holds three per instance: LaunchTime, the network interface's AttachTime, the root volume's)."""

    def create_parser(self, protocol_name: str) -> Any:
        return PROTOCOL_PARSERS[protocol_name](timestamp_parser=utc_timestamp)


class CloudWatchParsers(UtcTimestampParsers):
    """The parsers the CloudWatch client's endpoint creates per response: :class:`JsonListsAtOnce` for the JSON
    protocol, botocore's for the others; all with :func:`utc_timestamp`."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "json":
            return JsonListsAtOnce(timestamp_parser=utc_timestamp)
        return super().create_parser(protocol_name)


#: service -> the response parser factory its clients are built with (every other service: the Session's).
PARSERS: dict[str, type[ResponseParserFactory]] = {"cloudwatch": CloudWatchParsers, "ec2": UtcTimestampParsers}


def build_client(session: Any, service: str, **kwargs: Any) -> Any:
    """``session.client(service, **kwargs)`` (a boto3 Session), parsing responses with the service's :data:`PARSERS`.

    botocore reads the ``response_parser_factory`` component of the Session when it creates a client and keeps it in
    the client's endpoint, so the service's own factory is registered for that one creation and the shared one put
    back after: the Session's other clients, built before or after, keep botocore's parsers. Callers serialise
    client creation on a Session (``governor.adapters.aws.ClientCache`` builds under its lock).
    """
    factory = PARSERS.get(service)
    if factory is None:
        return session.client(service, **kwargs)
    core = session._session  # boto3's Session keeps its botocore Session here (no public accessor)
    shared = core.get_component("response_parser_factory")
    core.register_component("response_parser_factory", factory())
    try:
        return session.client(service, **kwargs)
    finally:
        core.register_component("response_parser_factory", shared)
