"""Every EventBridge rule the stack deploys, matched against public samples and their look-alikes.

The rules' patterns are read from the synthesized template and matched with moto's implementation of EventBridge
pattern matching (the offline stand-in for the TestEventPattern API). Each rule must fire on the events it is for
and stay quiet on look-alikes: failed calls (``errorCode``), non-GPU types, other states, other services.
"""

from __future__ import annotations

import copy
import importlib
import json
from typing import Any

import pytest
from moto.events.models import EventPattern

from governor.registry import REGISTRY
from governor_cli.testing.capacity import delivered, reservation_state
from tests.conftest import ROOT
from tests.infra.conftest import Synth

FIXTURES = ROOT / "tests" / "fixtures"


def _logical_id(*path: str) -> str:
    """A construct path's logical id prefix as CDK writes it: the ids joined, a repeated one written once."""
    return "".join(part for i, part in enumerate(path) if i == 0 or part != path[i - 1])


def _rules() -> tuple[str, ...]:
    """Every EventBridge rule the registry's triggers make: a ``rule`` trigger is its function's rule
    (``CapabilityConstruct.on_rule``), a ``bus`` trigger the construct's rule on the governor bus (``on_findings``)."""
    found = []
    for capability in REGISTRY.values():
        module, _, name = capability.construct.partition(":")
        function_id = getattr(importlib.import_module(module), name).FUNCTION_ID
        within = () if capability.within is None else (REGISTRY[capability.within].construct_id,)
        for trigger in capability.triggers:
            if trigger.kind == "rule":
                found.append(_logical_id(*within, capability.construct_id, function_id, trigger.id))
            elif trigger.kind == "bus":
                found.append(_logical_id(*within, capability.construct_id, trigger.id))
    return tuple(found)


#: Derived from the registry: a capability's new rule is found here without an edit (and needs samples below).
RULES = _rules()


#: moto's matcher does not descend into arrays of objects (responseElements.instancesSet.items[].instanceType),
#: which EventBridge does; the GPU-type filter of the lifecycle rule is asserted on the pattern in test_lifecycle.py.
MOTO_ARRAY_GAP = "moto does not match fields inside arrays of objects; EventBridge does"


def load(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / path).read_text())
    return data


def via_cloudtrail(record: dict[str, Any]) -> dict[str, Any]:
    """The "AWS API Call via CloudTrail" envelope EventBridge documents, around an unchanged CloudTrail record."""
    service = record["eventSource"].split(".", 1)[0]
    return {
        "version": "0",
        "id": record.get("eventID", "00000000-0000-0000-0000-000000000000"),
        "detail-type": "AWS API Call via CloudTrail",
        "source": f"aws.{service}",
        "account": record.get("recipientAccountId") or record["userIdentity"].get("accountId", "123456789012"),
        "time": record["eventTime"],
        "region": record.get("awsRegion", "us-east-1"),
        "resources": [],
        "detail": record,
    }


def failed(event: dict[str, Any], code: str = "Client.UnauthorizedOperation") -> dict[str, Any]:
    """Derived look-alike: the same call refused (CloudTrail adds errorCode and errorMessage)."""
    copied = copy.deepcopy(event)
    copied["detail"]["errorCode"] = code
    copied["detail"]["errorMessage"] = "You are not authorized to perform this operation."
    return copied


def with_state(event: dict[str, Any], state: str) -> dict[str, Any]:
    copied = copy.deepcopy(event)
    copied["detail"]["state"] = state
    return copied


def with_instance_type(event: dict[str, Any], instance_type: str) -> dict[str, Any]:
    copied = copy.deepcopy(event)
    for item in copied["detail"]["responseElements"]["instancesSet"]["items"]:
        item["instanceType"] = instance_type
    return copied


@pytest.fixture(scope="module")
def patterns(synth: Synth) -> dict[str, EventPattern]:
    found = {}
    for logical_id, rule in synth.resources("AWS::Events::Rule").items():
        name = next((r for r in RULES if logical_id.startswith(r)), None)
        assert name is not None, f"rule {logical_id} has no samples here: add them"
        found[name] = EventPattern.load(json.dumps(rule["Properties"]["EventPattern"]))
    assert set(found) == set(RULES)
    return found


def fired(patterns: dict[str, EventPattern], event: dict[str, Any]) -> set[str]:
    return {name for name, pattern in patterns.items() if pattern.matches_event(event)}


def with_tag_key(event: dict[str, Any], key: str) -> dict[str, Any]:
    copied = copy.deepcopy(event)
    for item in copied["detail"]["requestParameters"]["tagSet"]["items"]:
        item["key"] = key
    return copied


def invictus_record(file: str, event_id: str) -> dict[str, Any]:
    """One genuine record from the Invictus AWS dataset the audit tests use (see its PROVENANCE.md)."""
    records = load(f"cloudtrail/invictus-aws-dataset/{file}")["Records"]
    record: dict[str, Any] = next(r for r in records if r["eventID"] == event_id)
    return record


STATE = load("events/custodian-event-instance-state.json")
RUN = via_cloudtrail(load("events/custodian-event-cloud-trail-run-instances.json"))
GPU_RUN = with_instance_type(RUN, "g5.12xlarge")

TAGS = via_cloudtrail(
    invictus_record(
        "218007301253_CloudTrail_us-east-1_20230710T1215Z_YMDRJwtmC82bUwAo.json", "166db627-7c52-4552-ac56-5aad1d09bde8"
    )
)
EXEMPT_TAGS = with_tag_key(TAGS, "governor:exempt")
_BLOCK = {"[Capacity Reservation Id]": "cr-0a1b2c3d4e5f60718", "[ODCR ID]": "cr-0a1b2c3d4e5f60718"}
RESERVATION_WARNING = delivered("capacity-reservation-interruption-warning.json", {"[instance-id]": "i-0abc12345678"})
BLOCK_EXPIRY = delivered("capacity-block-expiration-warning.json", _BLOCK)
BLOCK_RESERVATION_EXPIRY = delivered("capacity-block-reservation-expiration-warning.json", _BLOCK)
BLOCK_DELIVERED = delivered("capacity-block-delivered.json", _BLOCK)
BLOCK_RESERVATION_DELIVERED = delivered("capacity-block-reservation-delivered.json", _BLOCK)
RESERVATION_STATES = {
    state: reservation_state(state, "cr-0a1b2c3d4e5f60718", "2026-12-01T10:15:00Z")
    for state in ("scheduled", "active", "delayed", "unsupported", "failed", "expired")
}
RECLAIMED = delivered(
    "interruptible-reclamation-completed.json",
    {"[source Capacity Reservation Owner Account ID]": "123456789012"},
    {"sourceCapacityReservationId": "cr-0a1b2c3d4e5f60718", "TotalInstanceCount": "2", "ReclaimedInstanceCount": "1"},
)

CASES: list[Any] = [
    # genuine samples
    ("custodian: instance pending", STATE, set()),
    ("custodian: S3 CreateBucket via CloudTrail", load("events/custodian-event-cloud-trail-create-bucket.json"), set()),
    ("custodian: RunInstances t2.micro", RUN, {"NetworkCloudTrailCalls"}),
    ("custodian: EC2 CreateVolume", via_cloudtrail(load("events/custodian-event-cloud-trail-create-volume.json")), set()),
    ("docs: Spot interruption warning", load("spot/interruption-warning.json"), {"SpotFunctionInterruption"}),
    ("docs: rebalance recommendation", load("spot/rebalance-recommendation.json"), {"SpotFunctionInterruption"}),
    ("docs: checkpoint command finished", load("spot/command-status-success.json"), {"SpotFunctionCheckpointStatus"}),
    ("docs: capacity reservation interruption warning", RESERVATION_WARNING, {"SpotFunctionInterruption"}),
    ("docs: Capacity Block Expiration Warning", BLOCK_EXPIRY, {"SpotFunctionInterruption"}),
    ("docs: Capacity Block Reservation Expiration Warning", BLOCK_RESERVATION_EXPIRY, {"SpotFunctionInterruption"}),
    ("docs: Capacity Block Delivered", BLOCK_DELIVERED, {"SpotFunctionInterruption"}),
    ("docs: Capacity Block Reservation Delivered", BLOCK_RESERVATION_DELIVERED, {"SpotFunctionInterruption"}),
    *[(f"docs: EC2 Capacity Reservation {s.capitalize()}", e, {"SpotFunctionInterruption"})
      for s, e in RESERVATION_STATES.items()],
    ("docs: interruptible capacity reclamation completed", RECLAIMED, {"SpotFunctionInterruption"}),
    ("docs: KMS CreateKey", via_cloudtrail(load("keys/create_key.json")), {"KeysCloudTrailCalls"}),
    ("docs: IAM CreateAccessKey", via_cloudtrail(load("keys/create_access_key.json")), {"KeysCloudTrailCalls"}),
    ("docs: Secrets Manager RotateSecret", via_cloudtrail(load("keys/rotate_secret.json")), {"KeysCloudTrailCalls"}),
    ("docs: EnableKeyRotation refused", via_cloudtrail(load("keys/enable_key_rotation_failed.json")), set()),
    ("network: AuthorizeSecurityGroupIngress", load("network/authorize_nested.json"), {"NetworkCloudTrailCalls"}),
    ("invictus: CreateTags StratusRedTeam on an AMI", TAGS, set()),
    # derived look-alikes
    ("derived: instance terminated", with_state(STATE, "terminated"),
     {"SpotFunctionStateChange", "LifecycleFunctionStateChange"}),
    ("derived: instance running", with_state(STATE, "running"), {"LifecycleFunctionStateChange"}),
    pytest.param(
        "derived: RunInstances g5", GPU_RUN, {"NetworkCloudTrailCalls", "LifecycleFunctionRunInstances"},
        marks=pytest.mark.xfail(strict=True, reason=MOTO_ARRAY_GAP),
    ),
    ("derived: RunInstances g5 refused", failed(GPU_RUN), set()),
    pytest.param(
        "derived: CreateTags governor:exempt", EXEMPT_TAGS, {"LifecycleFunctionGovernorTags"},
        marks=pytest.mark.xfail(strict=True, reason=MOTO_ARRAY_GAP),
    ),
    ("derived: CreateTags governor:exempt refused", failed(EXEMPT_TAGS), set()),
    ("derived: RunInstances t2.micro refused", failed(RUN), set()),
    ("derived: AuthorizeSecurityGroupIngress refused", failed(load("network/authorize_nested.json")), set()),
    ("derived: CreateAccessKey refused", failed(via_cloudtrail(load("keys/create_access_key.json")), "AccessDenied"),
     set()),
]  # fmt: skip


@pytest.mark.parametrize(("name", "event", "expected"), CASES, ids=[getattr(c, "values", c)[0] for c in CASES])
def test_each_rule_fires_on_its_events_only(
    patterns: dict[str, EventPattern], name: str, event: dict[str, Any], expected: set[str]
) -> None:
    assert fired(patterns, event) == expected, name


def test_new_secret_and_cancelled_rotation_reach_the_keys_function(patterns: dict[str, EventPattern]) -> None:
    """Derived from the RotateSecret sample: the two calls the rule used to miss."""
    base = via_cloudtrail(load("keys/rotate_secret.json"))
    for name in ("CreateSecret", "CancelRotateSecret"):
        event = copy.deepcopy(base)
        event["detail"]["eventName"] = name
        assert fired(patterns, event) == {"KeysCloudTrailCalls"}, name
        assert fired(patterns, failed(event, "AccessDeniedException")) == set(), name


@pytest.mark.parametrize("folder", ["events", "capacity"])
def test_every_sample_file_has_provenance(folder: str) -> None:
    readme = (FIXTURES / folder / "README.md").read_text()
    for path in sorted((FIXTURES / folder).glob("*.json")):
        assert path.name in readme, f"{path.name} has no provenance in tests/fixtures/{folder}/README.md"


def test_governor_findings_reach_the_notifier(patterns: dict[str, EventPattern]) -> None:
    finding = {"source": "gpu-fleet-governor", "detail-type": "Governor Finding", "detail": {}}
    assert fired(patterns, finding) == {"NotificationsFindings", "SecurityHubFindings"}
    assert fired(patterns, {**finding, "source": "custom.app"}) == set()  # only the stack's own source


#: AWS's own pattern for the reservation events ("Monitor state changes for future-dated Capacity Reservations").
AWS_RESERVATION_PATTERN = {"source": ["aws.ec2"], "detail-type": [{"prefix": "EC2 Capacity Reservation"}]}


def test_the_spot_rule_takes_every_reservation_event_awss_own_pattern_takes(patterns: dict[str, EventPattern]) -> None:
    """Every documented sample AWS's prefix pattern matches reaches the Spot function; a made-up kind under the same
    prefix does not (the rule names the kinds the function handles, so a new one is not parked in its DLQ)."""
    aws = EventPattern.load(json.dumps(AWS_RESERVATION_PATTERN))
    samples = [*RESERVATION_STATES.values(), RESERVATION_WARNING, RECLAIMED, BLOCK_DELIVERED, BLOCK_EXPIRY]
    for event in samples:
        if aws.matches_event(event):
            assert fired(patterns, event) == {"SpotFunctionInterruption"}, event["detail-type"]
    assert sum(aws.matches_event(e) for e in samples) == 7  # the six states and the instance interruption warning
    invented = RESERVATION_STATES["active"] | {"detail-type": "EC2 Capacity Reservation Resized"}
    assert aws.matches_event(invented) and fired(patterns, invented) == set()
