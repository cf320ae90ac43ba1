"""Mixed, independent events for the reliability runs: each case creates its own resource on the emulator, so its
expected outcome does not depend on any other event (the fault run can be compared case by case with a clean run).

Cases exist only for capabilities whose handler is present. ``forbidden`` names resources the policy must never
touch (non-GPU instances, protected groups): any action on them is an action outside the policy.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from governor.domain.decision import Finding
from governor.policy import Policy, parse_policy
from governor_cli.testing.deployment import REGION, handler_names, image_id
from governor_cli.testing.events import ACCOUNT, CLOUDTRAIL, cloudtrail, envelope, timestamp
from governor_cli.testing.events import finding as finding_event

PROTECTED_TAG = "governor:protected"
SLACK_WEBHOOK_SECRET = "governor/slack-webhook"  # noqa: S105 - a secret's name
EMAIL_SENDER = "governor@example.com"
CLICKER = "UANA"
RESPONSE_URL = "https://hooks.slack.com/actions/T0001/123/abc"
#: The reliability policy's shared part; each capability's section is its scenario hooks' ``SOAK`` (registry order).
SOAK_FLEET: dict[str, Any] = {"checkpoint_commands": {"train": "pkill -USR1 train"}}


def soak_policy_document() -> dict[str, Any]:
    """The reliability policy as YAML would hold it: the fleet, then each capability's ``SOAK`` section."""
    from governor_cli.demo.hooks import defining

    return {"fleet": SOAK_FLEET, **{capability.section: section for capability, section in defining("SOAK")}}


def soak_policy() -> Policy:
    """Enforcement on for the event-driven capabilities, so a case either acts or the policy says why not."""
    return parse_policy(soak_policy_document(), source="reliability policy")


@dataclass
class Case:
    """One event for one function, about one resource; ``acts`` is what a clean run is expected to do with it."""

    name: str
    function: str
    event: dict[str, Any]
    resource: str
    forbidden: bool = False
    kind: str = ""
    #: A synchronous request (Slack's POST to the Function URL): answered once, never retried by Lambda or parked.
    sync: bool = False
    #: Later events for the same function, delivered after the first delivery of ``event`` (an older finding of the
    #: same record arriving after its fix); judged with it, by what they leave behind (``record``).
    then: tuple[dict[str, Any], ...] = ()
    #: The Security Hub record the case leaves behind and the state the newest of its findings gives it
    #: (``testing.hub_state``).
    record: tuple[str, str] | None = None

    @property
    def event_id(self) -> str:
        return str(self.event["id"])

    @property
    def event_ids(self) -> tuple[str, ...]:
        """Every event the case delivers: its own, then the later ones."""
        return (self.event_id, *(str(later["id"]) for later in self.then))


#: A case builder in a capability's scenario hooks: the scenarios (their emulator clients) and the case's index.
Builder = Callable[["Scenarios", int], Case]


def cloudtrail_call(source: str, name: str, request: dict[str, Any], response: dict[str, Any] | None) -> dict[str, Any]:
    """A CloudTrail record of ``name`` by alice, as EventBridge delivers it."""
    service = source.split(".", 1)[1]
    return cloudtrail(
        {
            "eventVersion": "1.09",
            "userIdentity": {
                "type": "IAMUser",
                "arn": f"arn:aws:iam::{ACCOUNT}:user/alice",
                "accountId": ACCOUNT,
                "userName": "alice",
            },
            "eventTime": timestamp(),
            "eventSource": f"{service}.amazonaws.com",
            "eventName": name,
            "awsRegion": REGION,
            "sourceIPAddress": "198.51.100.7",
            "requestParameters": request,
            "responseElements": response,
            "eventID": str(uuid.uuid4()),
            "recipientAccountId": ACCOUNT,
        },
    )


def _kinded(scenarios: Scenarios, builder: Builder) -> Callable[[int], Case]:
    """``builder`` bound to ``scenarios``; its cases carry the builder's name as their kind."""

    def build(index: int) -> Case:
        case = builder(scenarios, index)
        case.kind = builder.__name__
        return case

    build.__name__ = builder.__name__
    return build


class Scenarios:
    """Builds cases on the emulator; ``make(n)`` returns ``n`` cases mixed over the capabilities present.

    Each capability's cases come from its scenario hooks (the registry's ``demo`` module): ``CASES``, a tuple of
    ``(weight, builder)``, in registry order. What is shared (a tagged GPU instance, a finding on the bus, the
    emulator's clients) is here.
    """

    def __init__(self, seed: int = 7) -> None:
        from governor.adapters.aws import client
        from governor_cli.demo.hooks import defining

        self.random = random.Random(seed)
        self.ec2 = client("ec2", REGION)
        self.kms = client("kms", REGION)
        self._image = image_id()
        self.vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        present = set(handler_names())
        builders = {c.name: cases for c, cases in defining("CASES") if c.name in present}
        self.builders = [(w, _kinded(self, b)) for cases in builders.values() for w, b in cases]
        self.owner = {b.__name__: name for name, cases in builders.items() for _, b in cases}
        self.invalid_functions = sorted(builders)

    def make(self, count: int, invalid_share: float = 0.05, capabilities: tuple[str, ...] = ()) -> list[Case]:
        """``count`` cases mixed over the capabilities present (only ``capabilities``' when named)."""
        chosen = [(w, b) for w, b in self.builders if not capabilities or self.owner[b.__name__] in capabilities]
        weights = [w for w, _ in chosen]
        cases = []
        for index in range(count):
            if self.invalid_functions and self.random.random() < invalid_share:
                cases.append(self.invalid(index))
                continue
            (builder,) = self.random.choices([b for _, b in chosen], weights)
            cases.append(builder(index))
        return cases

    def one_of_each(self) -> list[Case]:
        """A case of every kind the present handlers accept: the clean reference each mixed case is compared with."""
        return [builder(-1 - number) for number, (_, builder) in enumerate(self.builders)]

    def build(self, kind: str, index: int) -> Case:
        """One case of ``kind`` (its builder's name, e.g. ``spot_warning``)."""
        return next(builder for _, builder in self.builders if builder.__name__ == kind)(index)

    def instance(
        self, instance_type: str, *, market: dict[str, Any] | None = None, tags: dict[str, str] | None = None
    ) -> str:
        """A running instance tagged as the fleet's (``market``: its ``InstanceMarketOptions``)."""
        extra: dict[str, Any] = {"InstanceMarketOptions": market} if market else {}
        all_tags = {"team": "vision", "owner": "alice@example.com", "gpu-fleet": "true", **(tags or {})}
        return str(
            self.ec2.run_instances(
                ImageId=self._image,
                InstanceType=instance_type,
                MinCount=1,
                MaxCount=1,
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()]}
                ],
                **extra,
            )["Instances"][0]["InstanceId"]
        )

    def invalid(self, index: int) -> Case:
        """Malformed events for a present function: the clean outcome is a rejection to its DLQ, no action."""
        function = self.random.choice(self.invalid_functions)
        broken: list[dict[str, Any]] = [
            {"id": str(uuid.uuid4()), "detail-type": "EC2 Spot Instance Interruption Warning", "detail": "oops"},
            {"id": str(uuid.uuid4()), "source": "aws.ec2", "detail-type": 42, "detail": {}},
            {**envelope(CLOUDTRAIL, "aws.ec2", {"eventName": None}), "time": "yesterday"},
        ]
        return Case(f"invalid event #{index}", function, self.random.choice(broken), "-", kind="invalid")

    def finding_event(self, finding: Finding) -> dict[str, Any]:
        return finding_event(finding.model_dump(mode="json"))
