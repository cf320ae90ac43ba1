"""One boto3 Session for the whole runtime: every adapter's client comes from it, one client per service and region."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from governor.adapters import aws
from governor.adapters.aws import client
from governor.adapters.bus import EventBusSink
from governor.adapters.dlq import SqsDeadLetters
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ledger import DynamoLedger
from governor.adapters.ssm import SsmCommands
from governor.idle.metrics import CloudWatchMetrics


@pytest.fixture
def fresh() -> Iterator[None]:
    with mock_aws():
        client.cache_clear()
        yield
    client.cache_clear()


def test_every_adapter_shares_one_session_built_on_the_first_call(fresh: None) -> None:
    """Building the idle function's adapters loads no service model; the first calls share one Session."""
    before = client.sessions_created
    region = "us-east-1"
    adapters = [
        Ec2Reader(region),
        Ec2Actions(region),
        CloudWatchMetrics(region),
        SsmCommands(region),
        DynamoLedger("ledger", region=region),
        EventBusSink("governor", region),
        SqsDeadLetters("https://sqs.us-east-1.amazonaws.com/123456789012/dlq", region),
    ]
    assert len(adapters) == 7
    assert client.sessions_created - before == 0
    ec2 = client("ec2", region)
    assert isinstance(ec2, aws.LazyClient) and not ec2.built
    ec2.describe_instances()
    client("dynamodb", region).list_tables()
    assert ec2.built and not client("ssm", region).built  # SSM is asked for, never called: never built
    assert client.sessions_created - before == 1
    assert client("ec2", region) is client("ec2", region)  # Ec2Reader and Ec2Actions share one EC2 client
    assert client("ec2", "eu-west-1") is not client("ec2", region)
    assert client.sessions_created - before == 1


def test_clients_carry_the_bounded_retries(fresh: None) -> None:
    config = client("dynamodb", "us-east-1").meta.config
    assert config.retries["mode"] == "standard"
    assert config.connect_timeout == aws.RETRIES.connect_timeout == 3
    assert config.read_timeout == 15


def test_cache_clear_starts_a_new_session(fresh: None) -> None:
    first = client("sqs", "us-east-1")
    first.list_queues()
    created = client.sessions_created
    client.cache_clear()
    assert client("sqs", "us-east-1") is not first
    client("sqs", "us-east-1").list_queues()
    assert client.sessions_created == created + 1


def test_adapters_cached_per_session_go_with_the_clients(fresh: None) -> None:
    """A handler's cached adapters never outlive the clients they hold: clearing the clients clears them too (an
    earlier test's adapters on another emulator were once handed to the next test)."""
    from governor.idle import handler as idle
    from governor.network import handler as network

    built = network._aws("us-east-1")
    assert network._aws("us-east-1") is built
    idle_built = idle._aws("us-east-1", "MB")
    client.cache_clear()
    assert network._aws("us-east-1") is not built
    assert idle._aws("us-east-1", "MB") is not idle_built
