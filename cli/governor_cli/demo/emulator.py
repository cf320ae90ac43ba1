"""Start and stop moto's server on a loopback port, and point every boto3 client at it.

The demo and the end-to-end tests run the same handlers as Lambda; only ``AWS_ENDPOINT_URL`` differs.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import socket
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

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


def _indexed_get_metric_data(original: Callable[..., Any]) -> Callable[..., Any]:
    """moto's GetMetricData rescans every stored point for every query and every period; index them once instead.

    Same answers for ``MetricStat`` queries (values, timestamps, labels, ordering); anything else (metric math,
    Metrics Insights) goes to moto's own implementation.
    """

    def get_metric_data(
        self: Any, queries: list[dict[str, Any]], start_time: Any, end_time: Any, scan_by: str = "TimestampAscending"
    ) -> list[dict[str, Any]]:
        start, end = start_time.replace(microsecond=0), end_time.replace(microsecond=0)
        if start >= end or any("MetricStat" not in query for query in queries):
            return original(self, queries, start_time, end_time, scan_by)
        from moto.cloudwatch.models import Statistics

        index: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Any]] = defaultdict(list)
        for datum in self.get_all_metrics():
            if start <= datum.timestamp < end:
                dims = tuple(sorted((d.name, d.value) for d in datum.dimensions))
                index[(datum.namespace, datum.name, dims)].append(datum)
        results = []
        for query in queries:
            stat_query = query["MetricStat"]
            metric = stat_query["Metric"]
            period = int(stat_query["Period"])
            stat, unit = stat_query["Stat"], stat_query.get("Unit")
            dims = tuple(sorted((d["Name"], d["Value"]) for d in metric.get("Dimensions", [])))
            buckets: dict[int, list[Any]] = defaultdict(list)
            for datum in index.get((metric["Namespace"], metric["MetricName"], dims), []):
                if unit is None or datum.unit == unit:
                    buckets[int((datum.timestamp - start).total_seconds() // period)].append(datum)
            values, stamps = [], []
            for slot in sorted(buckets):
                stats = Statistics([stat], start + dt.timedelta(seconds=slot * period))
                stats.metric_data = buckets[slot]
                values.append(stats.get_statistics_for_type(stat))
                stamps.append(stats.timestamp)
            if scan_by == "TimestampDescending":
                values.reverse()
                stamps.reverse()
            if query.get("ReturnData", True):
                label = query.get("Label") or f"{metric['MetricName']} {stat}"
                results.append(
                    {
                        "id": query["Id"],
                        "label": label,
                        "values": values,
                        "timestamps": stamps,
                        "status_code": "Complete",
                    }
                )
        return results

    return get_metric_data


@contextmanager
def _fast_metric_queries() -> Iterator[None]:
    from moto.cloudwatch.models import CloudWatchBackend

    original = CloudWatchBackend.get_metric_data
    CloudWatchBackend.get_metric_data = _indexed_get_metric_data(original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        CloudWatchBackend.get_metric_data = original  # type: ignore[method-assign]


def _aws_wildcard(pattern: str) -> re.Pattern[str]:
    """A filter value as EC2 reads it: ``*`` any characters, ``?`` one character, everything else literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern))


@contextmanager
def filter_wildcards() -> Iterator[None]:
    """DescribeInstances filter values match wildcards in AWS (``instance-type`` ``g5.*``) and literally in moto; while
    active, the emulator matches them as AWS does, so the runtime's EC2 reads send the filters they send to AWS (the
    adapter re-checks the family in code either way)."""
    from moto.ec2 import utils

    original = utils.instance_value_in_filter_values

    def as_aws_does(instance_value: Any, filter_values: Any) -> bool:
        if isinstance(instance_value, str) and isinstance(filter_values, list | tuple | set):
            return any(_aws_wildcard(str(value)).fullmatch(instance_value) for value in filter_values)
        return bool(original(instance_value, filter_values))

    utils.instance_value_in_filter_values = as_aws_does
    try:
        yield
    finally:
        utils.instance_value_in_filter_values = original


@contextmanager
def whole_events() -> Iterator[None]:
    """A rule target without an input transformer receives the event as it is, in EventBridge. moto builds it from a
    default template by plain text replacement, field after field, so a ``<id>``, ``<region>`` or ``<time>`` inside
    the detail's own text (a finding's fix naming ``--instance-id <id>``, a tag value) is replaced by the event's own
    field, and the notifier and Security Hub then refuse a finding that differs from what the governor recorded.
    While active, the emulator hands such targets the event's fields untouched (the same keys moto's template has)."""
    from moto.events.utils import EventTemplateParser

    saved = EventTemplateParser.__dict__["parse"]
    original = EventTemplateParser.parse
    fields = ("id", "time", "version", "detail-type", "source", "region", "resources", "detail")

    def parse(input_template: str, input_paths_map: dict[str, Any], event: Any) -> dict[str, Any]:
        if input_template or input_paths_map:
            return original(input_template, input_paths_map, event)
        return {key: ("0" if key == "version" else event.get(key)) for key in fields}

    EventTemplateParser.parse = staticmethod(parse)  # type: ignore[method-assign]
    try:
        yield
    finally:
        EventTemplateParser.parse = saved  # type: ignore[method-assign]


def _warm_up(endpoint: str) -> None:
    """Build moto's EC2 backend (seconds of CPU: instance types and offerings of every region) with a patient client
    before the demo's first call: on a busy machine that first call could otherwise time out and be retried, and a
    retried CreateSecurityGroup fails as a duplicate."""
    import boto3
    from botocore.config import Config

    patient = Config(read_timeout=600, retries={"max_attempts": 1})
    boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1", config=patient).describe_vpcs()


@contextmanager
def running_emulator(port: int = 0, host: str = "127.0.0.1") -> Iterator[Emulator]:
    """A moto server for the duration of the block; the environment is restored and the server stopped after."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as error:
        raise EmulatorError(f"the local emulator needs moto[server] ({error})") from None
    if port:
        _check_port(host, port)
    # moto's server prints a whole traceback ("Error on request") for every call it does not implement (Cost
    # Explorer's GetSavingsPlansCoverage, EC2's DescribeCapacityReservations before the demo teaches it): the caller
    # gets the error as AWS would send one, and the governor handles and logs it, so the terminal gets nothing.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()  # moto's accounts live in the process: a second run in it starts from an empty account
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
    from governor.adapters.aws import client

    client.cache_clear()
    try:
        _warm_up(endpoint)
        with _fast_metric_queries(), filter_wildcards(), whole_events():
            yield Emulator(endpoint=endpoint)
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        client.cache_clear()
