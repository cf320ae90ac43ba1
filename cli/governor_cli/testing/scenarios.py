"""Mixed, independent events for the reliability runs: each case creates its own resource on the emulator, so its
expected outcome does not depend on any other event (the fault run can be compared case by case with a clean run).

Cases exist only for capabilities whose handler is present. ``forbidden`` names resources the policy must never
touch (non-GPU instances, protected groups): any action on them is an action outside the policy.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from governor.domain.decision import Finding
from governor.policy import Policy, parse_policy
from governor_cli.testing.deployment import LEDGER_TABLE, REGION, SLACK_SIGNING_SECRET, handler_names, image_id
from governor_cli.testing.events import ACCOUNT, CLOUDTRAIL, cloudtrail, envelope, scheduled, timestamp
from governor_cli.testing.events import finding as finding_event

PROTECTED_TAG = "governor:protected"
SLACK_WEBHOOK_SECRET = "governor/slack-webhook"  # noqa: S105 - a secret's name
EMAIL_SENDER = "governor@example.com"
CLICKER = "UANA"
RESPONSE_URL = "https://hooks.slack.com/actions/T0001/123/abc"
SOAK_POLICY: dict[str, Any] = {
    "fleet": {"checkpoint_commands": {"train": "pkill -USR1 train"}},
    "spot": {"enforce": True},
    # The scenarios' security groups carry no GPU instance: judging them all keeps every network case meaningful.
    "network": {"enforce": True, "scope": "all", "protected_groups": {"tags": {PROTECTED_TAG: "true"}}},
    "keys": {"enforce": True},
    "lifecycle": {"enforce": True},
    # Every finding goes out at once to one Slack channel and one mailbox; reports are sent; buttons act.
    "notifications": {
        "enforce": True,
        "slack_secret_name": SLACK_WEBHOOK_SECRET,
        "email_sender": EMAIL_SENDER,
        "email_recipients": ["platform@example.com"],
        "immediate": "all",
    },
    "reports": {"enforce": True},
    "interactions": {"enforce": True, "buttons": True, "slack_users": {CLICKER: "alice@example.com"}},
}


def soak_policy() -> Policy:
    """Enforcement on for the event-driven capabilities, so a case either acts or the policy says why not."""
    return parse_policy(SOAK_POLICY, source="reliability policy")


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

    @property
    def event_id(self) -> str:
        return str(self.event["id"])


def _cloudtrail(source: str, name: str, request: dict[str, Any], response: dict[str, Any] | None) -> dict[str, Any]:
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


def _kinded(builder: Callable[[int], Case]) -> Callable[[int], Case]:
    def build(index: int) -> Case:
        case = builder(index)
        case.kind = builder.__name__
        return case

    build.__name__ = builder.__name__
    return build


class Scenarios:
    """Builds cases on the emulator; ``make(n)`` returns ``n`` cases mixed over the capabilities present."""

    def __init__(self, seed: int = 7) -> None:
        from governor.adapters.aws import client

        self._random = random.Random(seed)
        self._ec2 = client("ec2", REGION)
        self._kms = client("kms", REGION)
        self._image = image_id()
        self._vpc = self._ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        present = set(handler_names())
        builders: dict[str, list[tuple[int, Callable[[int], Case]]]] = {
            "spot": [(4, self.spot_warning), (1, self.spot_warning_not_gpu)],
            "network": [(4, self.network_world_open_ssh), (1, self.network_protected_group)],
            "keys": [(3, self.keys_rotation_disabled)],
            "lifecycle": [(3, self.lifecycle_gpu_launch), (1, self.lifecycle_not_gpu_launch)],
            "notifier": [(3, self.notifier_security_finding), (1, self.notifier_idle_warning)],
            "report": [(1, self.report_tick)],
            "interactions": [
                (1, self.interactions_keep_click),
                (1, self.interactions_stop_click),
                (1, self.interactions_signed_request),
                (1, self.interactions_forged_request),
            ],
        }
        self.builders = [
            (w, _kinded(b)) for function, items in builders.items() if function in present for w, b in items
        ]
        self.invalid_functions = sorted(present & set(builders))

    def make(self, count: int, invalid_share: float = 0.05) -> list[Case]:
        weights = [w for w, _ in self.builders]
        cases = []
        for index in range(count):
            if self.invalid_functions and self._random.random() < invalid_share:
                cases.append(self.invalid(index))
                continue
            (builder,) = self._random.choices([b for _, b in self.builders], weights)
            cases.append(builder(index))
        return cases

    def one_of_each(self) -> list[Case]:
        """A case of every kind the present handlers accept: the clean reference each mixed case is compared with."""
        return [builder(-1 - number) for number, (_, builder) in enumerate(self.builders)]

    def _instance(self, instance_type: str, *, spot: bool = False, tags: dict[str, str] | None = None) -> str:
        extra: dict[str, Any] = {}
        if spot:
            extra["InstanceMarketOptions"] = {"MarketType": "spot"}
        all_tags = {"team": "vision", "owner": "alice@example.com", "gpu-fleet": "true", **(tags or {})}
        return str(
            self._ec2.run_instances(
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

    def spot_warning(self, index: int) -> Case:
        instance = self._instance("g5.xlarge", spot=True, tags={"governor:checkpoint-command": "train"})
        event = envelope(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            {"instance-id": instance, "instance-action": "terminate"},
        )
        return Case(f"spot warning #{index}", "spot", event, instance)

    def spot_warning_not_gpu(self, index: int) -> Case:
        instance = self._instance("m5.large", spot=True)
        event = envelope(
            "EC2 Spot Instance Interruption Warning", "aws.ec2", {"instance-id": instance, "instance-action": "stop"}
        )
        return Case(f"spot warning, not GPU #{index}", "spot", event, instance, forbidden=True)

    def _open_group(self, index: int, tags: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
        spec = [{"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}]
        group = self._ec2.create_security_group(
            GroupName=f"training-{index}-{uuid.uuid4().hex[:6]}",
            Description="gpu nodes",
            VpcId=self._vpc,
            **({"TagSpecifications": spec} if tags else {}),
        )["GroupId"]
        permission = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
        self._ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[permission])
        rules = self._ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])
        items = [
            {
                "securityGroupRuleId": r["SecurityGroupRuleId"],
                "groupId": group,
                "isEgress": False,
                "ipProtocol": r["IpProtocol"],
                "fromPort": r["FromPort"],
                "toPort": r["ToPort"],
                "cidrIpv4": r.get("CidrIpv4", ""),
            }
            for r in rules["SecurityGroupRules"]
            if not r["IsEgress"]
        ]
        request = {
            "groupId": group,
            "ipPermissions": {
                "items": [
                    {
                        "ipProtocol": "tcp",
                        "fromPort": 22,
                        "toPort": 22,
                        "ipRanges": {"items": [{"cidrIp": "0.0.0.0/0"}]},
                    }
                ]
            },
        }
        event = _cloudtrail(
            "aws.ec2",
            "AuthorizeSecurityGroupIngress",
            request,
            {"_return": True, "securityGroupRuleSet": {"items": items}},
        )
        return group, event

    def network_world_open_ssh(self, index: int) -> Case:
        group, event = self._open_group(index, {"team": "vision"})
        return Case(f"ssh open to the world #{index}", "network", event, group)

    def network_protected_group(self, index: int) -> Case:
        group, event = self._open_group(index, {PROTECTED_TAG: "true"})
        return Case(f"ssh open on a protected group #{index}", "network", event, group, forbidden=True)

    def keys_rotation_disabled(self, index: int) -> Case:
        key = self._kms.create_key(Description=f"training data key {index}")["KeyMetadata"]
        event = _cloudtrail("aws.kms", "DisableKeyRotation", {"keyId": key["KeyId"]}, {"keyId": key["Arn"]})
        return Case(f"key rotation disabled #{index}", "keys", event, key["KeyId"])

    def _launch(self, index: int, instance_type: str) -> tuple[str, dict[str, Any]]:
        instance = self._instance(instance_type)
        response = {"instancesSet": {"items": [{"instanceId": instance, "instanceType": instance_type}]}}
        event = _cloudtrail("aws.ec2", "RunInstances", {"instanceType": instance_type}, response)
        return instance, event

    def lifecycle_gpu_launch(self, index: int) -> Case:
        instance, event = self._launch(index, "g5.xlarge")
        return Case(f"GPU launch #{index}", "lifecycle", event, instance)

    def lifecycle_not_gpu_launch(self, index: int) -> Case:
        instance, event = self._launch(index, "m5.large")
        return Case(f"non-GPU launch #{index}", "lifecycle", event, instance, forbidden=True)

    def invalid(self, index: int) -> Case:
        """Malformed events for a present function: the clean outcome is a rejection to its DLQ, no action."""
        function = self._random.choice(self.invalid_functions)
        broken: list[dict[str, Any]] = [
            {"id": str(uuid.uuid4()), "detail-type": "EC2 Spot Instance Interruption Warning", "detail": "oops"},
            {"id": str(uuid.uuid4()), "source": "aws.ec2", "detail-type": 42, "detail": {}},
            {**envelope(CLOUDTRAIL, "aws.ec2", {"eventName": None}), "time": "yesterday"},
        ]
        return Case(f"invalid event #{index}", function, self._random.choice(broken), "-", kind="invalid")

    # --- notifier: findings from the governor bus to Slack and email ------------------------------------------

    def _finding_event(self, finding: Finding) -> dict[str, Any]:
        return finding_event(finding.model_dump(mode="json"))

    def notifier_security_finding(self, index: int) -> Case:
        """A critical network finding about its own group: one Slack message and one email, each exactly once."""
        resource = f"sg-{uuid.uuid4().hex[:17]}"
        finding = Finding(
            policy="network",
            rule="network.world-open",
            severity="critical",
            resource=resource,
            title=f"SSH open to the world on {resource}",
            team="vision",
            owner="alice@example.com",
            event_id=str(uuid.uuid4()),
            id=uuid.uuid4().hex,
        )
        return Case(f"finding to deliver #{index}", "notifier", self._finding_event(finding), resource)

    def notifier_idle_warning(self, index: int) -> Case:
        """An idle warning: delivered with its buttons (the token's record goes to the ledger first)."""
        resource = f"i-{uuid.uuid4().hex[:17]}"
        finding = Finding(
            policy="idle",
            rule="idle.warned",
            severity="warning",
            resource=resource,
            title=f"Idle GPU instance {resource} will be stopped",
            team="vision",
            owner="alice@example.com",
            event_id=str(uuid.uuid4()),
            id=uuid.uuid4().hex,
        )
        return Case(f"idle warning to deliver #{index}", "notifier", self._finding_event(finding), resource)

    # --- report: one scheduled tick, one report archived and sent -----------------------------------------------

    def report_tick(self, index: int) -> Case:
        # The report covers the UTC day before its event's time: the key follows that time, not a second reading
        # of the clock (which a run just before midnight would take on the other side of it)
        at = dt.datetime.now(dt.UTC).replace(microsecond=0)
        event = scheduled({"kind": "daily"}, time=at)
        start = (at - dt.timedelta(days=1)).date()
        return Case(f"daily report tick #{index}", "report", event, f"report:daily:{start:%Y-%m-%d}")

    # --- interactions: Slack's clicks, verified at the endpoint, acted on once by the worker --------------------

    def _button(self, instance: str) -> str:
        """What the notifier leaves behind when it sends an idle warning with buttons: the token's ledger record."""
        from governor.adapters.ledger import DynamoLedger
        from governor.interactions.domain import BUTTON_KIND, button_record, button_token

        finding = Finding(
            policy="idle",
            rule="idle.warned",
            severity="warning",
            resource=instance,
            title=f"Idle GPU instance {instance} will be stopped",
            owner="alice@example.com",
            team="vision",
            event_id=str(uuid.uuid4()),
        )
        token = button_token(finding)
        DynamoLedger(LEDGER_TABLE, region=REGION).put_item(BUTTON_KIND, token, button_record(finding, token))
        return token

    def _click_body(self, token: str, action_id: str) -> str:
        from urllib.parse import urlencode

        payload = {
            "type": "block_actions",
            "user": {"id": CLICKER, "username": "ana", "team_id": "T0001"},
            "team": {"id": "T0001", "domain": "example"},
            "response_url": RESPONSE_URL,
            "trigger_id": "123.456.abc",
            "message": {"blocks": [{"type": "actions", "block_id": f"governor:{token}", "elements": []}]},
            "actions": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "block_id": f"governor:{token}",
                    "value": token,
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }
        return urlencode({"payload": json.dumps(payload)})

    def _worker_event(self, action_id: str, index: int, name: str) -> Case:
        from governor.interactions.domain import CLICKED, SOURCE, parse_click

        instance = self._instance("g5.xlarge")
        click = parse_click(self._click_body(self._button(instance), action_id))
        event = envelope(CLICKED, SOURCE, click.model_dump(mode="json"))
        event["id"] = click.key
        return Case(f"{name} #{index}", "interactions", event, instance)

    def interactions_keep_click(self, index: int) -> Case:
        """The worker's hand-over for Keep 4 h: one snooze tag, one decision."""
        from governor.interactions.domain import KEEP_HOURS

        return self._worker_event(KEEP_HOURS, index, "Keep 4 h click")

    def interactions_stop_click(self, index: int) -> Case:
        """The worker's hand-over for Stop now: one Stop request to the idle function, one decision."""
        from governor.interactions.domain import STOP_NOW

        return self._worker_event(STOP_NOW, index, "Stop now click")

    def _request(self, body: str, secret: str) -> dict[str, Any]:
        timestamp = str(int(time.time()))
        digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
        headers = {
            "content-type": "application/x-www-form-urlencoded",
            "x-slack-request-timestamp": timestamp,
            "x-slack-signature": f"v0={digest}",
        }
        return {
            "version": "2.0",
            "rawPath": "/",
            "headers": headers,
            "requestContext": {"http": {"method": "POST", "path": "/", "sourceIp": "3.3.3.3"}, "timeEpoch": 0},
            "body": body,
            "isBase64Encoded": False,
        }

    def interactions_signed_request(self, index: int) -> Case:
        """Slack's POST, signed: answered 200 and handed to the worker exactly once."""
        from governor.interactions.domain import STOP_NOW

        instance = self._instance("g5.xlarge")
        body = self._click_body(self._button(instance), STOP_NOW)
        event = self._request(body, SLACK_SIGNING_SECRET)
        event["id"] = str(uuid.uuid4())  # the harness's handle on the request; the endpoint ignores it
        return Case(f"signed click request #{index}", "interactions", event, instance, sync=True)

    def interactions_forged_request(self, index: int) -> Case:
        """The same POST signed with another secret: refused (401), nothing handed over, nothing read."""
        from governor.interactions.domain import STOP_NOW

        instance = self._instance("g5.xlarge")
        body = self._click_body(self._button(instance), STOP_NOW)
        event = self._request(body, "not-the-signing-secret")
        event["id"] = str(uuid.uuid4())
        return Case(f"forged click request #{index}", "interactions", event, instance, forbidden=True, sync=True)
