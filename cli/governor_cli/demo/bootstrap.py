"""Create, on the emulator, what the stack would deploy for the handlers: ledger, idempotency table, bus, DLQs.

Returns the environment each function would get from the Lambda factory, so handlers run unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from governor.adapters.aws import client
from governor.policy import Policy, environment_policy
from governor.registry import REGISTRY

FUNCTIONS = tuple(REGISTRY)


@dataclass
class LocalStack:
    """Names of the emulated shared resources, and one DLQ URL per function."""

    ledger_table: str = "governor-ledger"
    idempotency_table: str = "governor-idempotency"
    bus_name: str = "governor"
    dlq_urls: dict[str, str] = field(default_factory=dict)
    #: Organisation mode (the demo's ``--accounts``/``--regions``): the spoke role's name, and the hub's own account.
    spoke_role: str | None = None
    home_account: str = "123456789012"

    def environment(self, function: str, policy: Policy) -> dict[str, str]:
        """What ``infra/constructs/function.py`` puts in a function's environment: the same policy sections."""
        return {
            "GOVERNOR_FUNCTION": function,
            "GOVERNOR_POLICY": environment_policy(policy, REGISTRY[function].environment_sections),
            "LEDGER_TABLE": self.ledger_table,
            "IDEMPOTENCY_TABLE": self.idempotency_table,
            "BUS_NAME": self.bus_name,
            "DLQ_URL": self.dlq_urls[function],
            "POWERTOOLS_SERVICE_NAME": "gpu-fleet-governor",
            "POWERTOOLS_METRICS_NAMESPACE": "GpuFleetGovernor",
            "IDLE_FUNCTION": "governor-idle",
            **(
                {"GOVERNOR_SPOKE_ROLE": self.spoke_role, "GOVERNOR_HOME_ACCOUNT": self.home_account}
                if self.spoke_role
                else {}
            ),
        }


def create_ledger_table(name: str, region: str = "us-east-1", dynamodb: Any = None) -> None:
    """The ledger table as ``infra/constructs/shared.py`` defines it: ``pk``/``sk``, the ``by-kind`` and
    ``by-target`` indexes.

    ``dynamodb`` is a client to use instead of the runtime's (a bench's own session against an emulator).
    """
    (dynamodb or client("dynamodb", region)).create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": key, "AttributeType": "S"} for key in ("pk", "sk", "kind", "at", "target")
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-kind",
                "KeySchema": [
                    {"AttributeName": "kind", "KeyType": "HASH"},
                    {"AttributeName": "at", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": "by-target",
                "KeySchema": [
                    {"AttributeName": "target", "KeyType": "HASH"},
                    {"AttributeName": "kind", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
        ],
    )


def create_shared(region: str = "us-east-1") -> LocalStack:
    stack = LocalStack()
    dynamodb = client("dynamodb", region)
    create_ledger_table(stack.ledger_table, region)
    dynamodb.create_table(
        TableName=stack.idempotency_table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    client("events", region).create_event_bus(Name=stack.bus_name)
    sqs = client("sqs", region)
    for function in FUNCTIONS:
        stack.dlq_urls[function] = sqs.create_queue(QueueName=f"governor-{function}-dlq")["QueueUrl"]
    return stack
