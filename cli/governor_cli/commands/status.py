"""``governor status --stack NAME``: is a deployed governor working, in one account and region? Read-only.

Like ``kubectl get`` or ``sky status``, one line per thing an operator would check after ``cdk deploy`` and any day
after: the stack's state; each function present, its last invocation and errors in the last 24 hours; each schedule
enabled; each dead-letter queue empty; each alarm not in ALARM; GPU instances running vs reporting GPU metrics (the
CloudWatch agent installed and publishing); the Slack webhook secret present; the SES sender verified and whether
the account is still in the SES sandbox; the idle circuit breaker; the last report's time.

Exit 0 when healthy, 1 when degraded (each degraded line says why), 2 on bad input (an unknown stack, no
credentials).

``governor status --table NAME`` (without ``--stack``) is the fleet view instead: one line per GPU instance from the
ledger and the idle sweep's last run (:mod:`governor_cli.fleet_status`). ``--stack`` answers "is the governor
working?", ``--table`` answers "what is it doing to my fleet?".
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

OK, DEGRADED, INFO = "ok", "degraded", "info"
HELP = "the GPU fleet, one line per instance (--table), or a deployed governor's health (--stack)"
GPU_METRIC = ("CWAgent", "nvidia_smi_utilization_gpu")


@dataclass(frozen=True)
class Check:
    """One line of the answer: what was checked, its state, and why."""

    area: str
    subject: str
    state: str
    reason: str

    def line(self) -> str:
        mark = {OK: "ok      ", DEGRADED: "DEGRADED", INFO: "info    "}[self.state]
        return f"{mark} {self.area:<10} {self.subject}: {self.reason}"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help=HELP,
        description="The GPU fleet (--table: one line per instance) or a deployed governor's health (--stack).",
    )
    from governor_cli.flags import add_policy, add_region, add_table, add_target

    view = parser.add_mutually_exclusive_group()
    add_table(view, required=False)
    view.add_argument("--stack", help="deploy health: the CloudFormation stack name (e.g. GpuFleetGovernor)")
    add_region(parser)
    add_target(parser)
    add_policy(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.set_defaults(run=run)


class Aws:
    """The boto3 clients of one region; created on first use."""

    def __init__(self, region: str | None) -> None:
        import boto3

        self._session = boto3.session.Session(region_name=region)
        self._clients: dict[str, Any] = {}
        self.region = self._session.region_name

    def __call__(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._session.client(service)
        return self._clients[service]


def _guard(area: str, subject: str, probe: Callable[[], list[Check]]) -> list[Check]:
    """Run ``probe``; an AWS error becomes a degraded line naming the call, never a traceback."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return probe()
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        return [Check(area, subject, DEGRADED, f"cannot read ({code}: {error.response['Error'].get('Message', '')})")]
    except BotoCoreError as error:
        return [Check(area, subject, DEGRADED, f"cannot read ({error})")]


def _resources(aws: Aws, stack: str) -> list[dict[str, Any]]:
    pages = aws("cloudformation").get_paginator("list_stack_resources").paginate(StackName=stack)
    return [resource for page in pages for resource in page["StackResourceSummaries"]]


def _of(resources: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return sorted((r for r in resources if r["ResourceType"] == kind), key=lambda r: r["LogicalResourceId"])


def stack_state(aws: Aws, stack: str) -> tuple[list[Check], dict[str, str]]:
    (described,) = aws("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    status = described["StackStatus"]
    healthy = status.endswith("_COMPLETE") and "ROLLBACK" not in status and "DELETE" not in status
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    return [Check("stack", stack, OK if healthy else DEGRADED, status)], outputs


def functions(aws: Aws, resources: list[dict[str, Any]], now: datetime) -> list[Check]:
    checks: list[Check] = []
    found = _of(resources, "AWS::Lambda::Function")
    if not found:
        return [Check("function", "-", DEGRADED, "the stack has no function")]
    queries, names = [], {}
    for index, resource in enumerate(found):
        name = resource["PhysicalResourceId"]
        names[f"i{index}"] = names[f"e{index}"] = name
        for prefix, metric in (("i", "Invocations"), ("e", "Errors")):
            queries.append(
                {
                    "Id": f"{prefix}{index}",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": "AWS/Lambda",
                            "MetricName": metric,
                            "Dimensions": [{"Name": "FunctionName", "Value": name}],
                        },
                        "Period": 3600,
                        "Stat": "Sum",
                    },
                }
            )
    series: dict[str, tuple[list[datetime], list[float]]] = {}
    for start in range(0, len(queries), 500):
        result = aws("cloudwatch").get_metric_data(
            MetricDataQueries=queries[start : start + 500], StartTime=now - timedelta(hours=24), EndTime=now
        )
        for item in result["MetricDataResults"]:
            series[item["Id"]] = (item.get("Timestamps", []), item.get("Values", []))
    for index, resource in enumerate(found):
        name = resource["PhysicalResourceId"]
        state = aws("lambda").get_function(FunctionName=name)["Configuration"].get("State", "Active")
        stamps, invocations = series.get(f"i{index}", ([], []))
        _, errors = series.get(f"e{index}", ([], []))
        ran = [t for t, v in zip(stamps, invocations, strict=False) if v > 0]
        last = f"last invoked {max(ran):%Y-%m-%d %H:%M} UTC" if ran else "not invoked in 24 h"
        error_count = int(sum(errors))
        if state != "Active":
            checks.append(Check("function", name, DEGRADED, f"state {state}"))
        elif error_count:
            checks.append(Check("function", name, DEGRADED, f"{error_count} errors in 24 h; {last}"))
        else:
            checks.append(
                Check("function", name, OK, f"{int(sum(invocations))} invocations, no errors in 24 h; {last}")
            )
    return checks


def schedules(aws: Aws, resources: list[dict[str, Any]]) -> list[Check]:
    checks: list[Check] = []
    for resource in _of(resources, "AWS::Scheduler::Schedule"):
        name = resource["PhysicalResourceId"]
        schedule = aws("scheduler").get_schedule(Name=name)
        state = schedule.get("State", "ENABLED")
        where = schedule.get("ScheduleExpression", "")
        checks.append(Check("schedule", name, OK if state == "ENABLED" else DEGRADED, f"{state} {where}".strip()))
    return checks


def queues(aws: Aws, resources: list[dict[str, Any]]) -> list[Check]:
    checks: list[Check] = []
    for resource in _of(resources, "AWS::SQS::Queue"):
        if "Dlq" not in resource["LogicalResourceId"] and "Dead" not in resource["LogicalResourceId"]:
            continue
        url = resource["PhysicalResourceId"]
        attributes = aws("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        depth = int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
            attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
        )
        name = url.rsplit("/", 1)[-1]
        if depth:
            reason = f"{depth} message{'' if depth == 1 else 's'} waiting: governor dlq list --queue-url {url}"
            checks.append(Check("dlq", name, DEGRADED, reason))
        else:
            checks.append(Check("dlq", name, OK, "empty"))
    return checks


def alarms(aws: Aws, resources: list[dict[str, Any]]) -> list[Check]:
    wanted = [r["PhysicalResourceId"] for r in _of(resources, "AWS::CloudWatch::Alarm")]
    states: dict[str, str] = {}
    for start in range(0, len(wanted), 100):
        for alarm in aws("cloudwatch").describe_alarms(AlarmNames=wanted[start : start + 100])["MetricAlarms"]:
            states[alarm["AlarmName"]] = alarm["StateValue"]
    checks: list[Check] = []
    for name in wanted:
        state = states.get(name)
        if state is None:
            checks.append(Check("alarm", name, DEGRADED, "not found"))
        else:
            checks.append(Check("alarm", name, DEGRADED if state == "ALARM" else OK, state))
    return checks


def gpu_agents(aws: Aws, policy: Any) -> list[Check]:
    """Running fleet GPU instances against the instances publishing the agent's GPU metric in the last 3 hours."""
    import fnmatch

    patterns = policy.fleet.iam_instance_type_patterns()
    pages = (
        aws("ec2")
        .get_paginator("describe_instances")
        .paginate(Filters=[{"Name": "instance-state-name", "Values": ["running"]}])
    )
    running = sorted(
        instance["InstanceId"]
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
        if any(fnmatch.fnmatch(instance["InstanceType"], p) for p in patterns)
    )
    namespace, metric = GPU_METRIC
    reporting: set[str] = set()
    for page in (
        aws("cloudwatch")
        .get_paginator("list_metrics")
        .paginate(Namespace=namespace, MetricName=metric, RecentlyActive="PT3H")
    ):
        for found in page["Metrics"]:
            reporting |= {d["Value"] for d in found.get("Dimensions", []) if d["Name"] == "InstanceId"}
    silent = [i for i in running if i not in reporting]
    if not running:
        return [Check("gpu", "instances", INFO, "no running GPU instance of the fleet's families")]
    if silent:
        shown = ", ".join(silent[:5]) + (" ..." if len(silent) > 5 else "")
        return [
            Check(
                "gpu",
                "instances",
                DEGRADED,
                f"{len(silent)} of {len(running)} running GPU instances publish no {metric} (agent missing?): {shown}",
            )
        ]
    return [Check("gpu", "instances", OK, f"{len(running)} running, all publishing {metric}")]


def notifications(aws: Aws, policy: Any) -> list[Check]:
    settings = policy.notifications
    checks: list[Check] = []
    secret = settings.slack_secret_name
    if secret:

        def webhook() -> list[Check]:
            aws("secretsmanager").describe_secret(SecretId=secret)
            return [Check("slack", secret, OK, "webhook secret present")]

        found = _guard("slack", secret, webhook)
        if found[0].state != OK:
            found = [Check("slack", secret, DEGRADED, "webhook secret missing: nothing reaches Slack (docs/slack.md)")]
        checks += found
    sender = getattr(settings, "email_sender", None)
    if sender:
        identity = sender.split("@", 1)[-1] if "@" in sender else sender

        def ses() -> list[Check]:
            out: list[Check] = []
            for name in dict.fromkeys([sender, identity]):
                try:
                    found = aws("sesv2").get_email_identity(EmailIdentity=name)
                except aws("sesv2").exceptions.NotFoundException:
                    continue
                verified = found.get("VerifiedForSendingStatus", False)
                out.append(Check("email", name, OK if verified else DEGRADED, "verified" if verified else "unverified"))
                break
            else:
                out.append(
                    Check("email", sender, DEGRADED, "no SES identity for the sender: verify it (docs/deploy.md)")
                )
            account = aws("sesv2").get_account()
            if not account.get("ProductionAccessEnabled", False):
                out.append(Check("email", "account", INFO, "SES sandbox: only verified recipients receive mail"))
            return out

        checks += _guard("email", sender, ses)
    return checks


def breaker(aws: Aws, table: str | None) -> list[Check]:
    if not table:
        return [Check("breaker", "idle", DEGRADED, "no LedgerTableName output on the stack")]
    from governor.adapters.ledger import DynamoLedger
    from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, Breaker
    from governor_cli.commands.idle import describe

    state = Breaker.from_item(DynamoLedger(table, region=aws.region).get_item(BREAKER_KIND, BREAKER_KEY))
    return [Check("breaker", "idle", DEGRADED if state.open else OK, describe(state))]


def last_report(aws: Aws, resources: list[dict[str, Any]], now: datetime) -> list[Check]:
    buckets = [
        r["PhysicalResourceId"] for r in _of(resources, "AWS::S3::Bucket") if "Reports" in r["LogicalResourceId"]
    ]
    buckets = [b for b in buckets if "accesslogs" not in b.lower()]
    if not buckets:
        return [Check("report", "-", INFO, "this stack keeps no report archive")]
    newest: datetime | None = None
    for page in aws("s3").get_paginator("list_objects_v2").paginate(Bucket=buckets[0]):
        for item in page.get("Contents", []):
            newest = max(newest, item["LastModified"]) if newest else item["LastModified"]
    if newest is None:
        return [Check("report", buckets[0], INFO, "no report sent yet (the first one follows the reports schedule)")]
    age = now - newest
    state = OK if age <= timedelta(days=8) else DEGRADED
    return [Check("report", buckets[0], state, f"last report {newest:%Y-%m-%d %H:%M} UTC")]


def stack_checks(aws: Aws, stack: str, policy: Any, now: datetime) -> list[Check]:
    """Every check of one deployed stack, in the order an operator reads them."""
    checks, outputs = stack_state(aws, stack)
    resources = _resources(aws, stack)
    checks += _guard("function", "*", lambda: functions(aws, resources, now))
    checks += _guard("schedule", "*", lambda: schedules(aws, resources))
    checks += _guard("dlq", "*", lambda: queues(aws, resources))
    checks += _guard("alarm", "*", lambda: alarms(aws, resources))
    checks += _guard("gpu", "instances", lambda: gpu_agents(aws, policy))
    checks += notifications(aws, policy)
    ledger = outputs.get("LedgerTableName") or next(
        (
            r["PhysicalResourceId"]
            for r in _of(resources, "AWS::DynamoDB::Table")
            if r["LogicalResourceId"].startswith("SharedLedger")
        ),
        None,
    )
    checks += _guard("breaker", "idle", lambda: breaker(aws, ledger))
    checks += _guard("report", "*", lambda: last_report(aws, resources, now))
    return checks


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from governor.policy import PolicyError, resolve_policy
    from governor_cli.main import UsageError

    if not args.stack and not args.table:
        raise UsageError(
            "status needs --table NAME (the ledger table, stack output LedgerTableName) for the fleet view, "
            "or --stack NAME for the deployed governor's health"
        )
    if args.target and not args.table:
        raise UsageError(
            "--target ACCOUNT/REGION selects one organisation target of the fleet view: use it with --table"
        )
    try:
        policy = resolve_policy(args.policy)[0]
    except PolicyError as error:
        raise UsageError(str(error)) from None
    if args.table:
        return fleet(args, policy)
    aws = Aws(args.region)
    try:
        checks = stack_checks(aws, args.stack, policy, datetime.now(UTC))
    except NoCredentialsError:
        raise UsageError("no AWS credentials: set AWS_PROFILE or the AWS_* variables") from None
    except ClientError as error:
        message = error.response.get("Error", {}).get("Message", str(error))
        raise UsageError(f"stack {args.stack} in {aws.region}: {message}") from None
    except BotoCoreError as error:
        raise UsageError(f"stack {args.stack} in {aws.region}: {error}") from None
    degraded = [c for c in checks if c.state == DEGRADED]
    if args.json:
        print(json.dumps({"stack": args.stack, "region": aws.region, "healthy": not degraded,
                          "checks": [asdict(c) for c in checks]}, indent=1))  # fmt: skip
    else:
        for check in checks:
            print(check.line())
        verdict = f"degraded: {len(degraded)} of {len(checks)} checks" if degraded else f"healthy: {len(checks)} checks"
        print(f"{args.stack} in {aws.region}: {verdict}")
    return 1 if degraded else 0


def fleet(args: argparse.Namespace, policy: Any) -> int:
    """The fleet view: ledger (marks, last sweep, breaker) plus, in one account, the live GPU instances."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from governor.adapters.ec2 import Ec2Reader
    from governor.adapters.ledger import DynamoLedger
    from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, Breaker
    from governor_cli import fleet_status as view
    from governor_cli.commands.ledger import table_region
    from governor_cli.main import UsageError

    now = view.clock()
    region = table_region(args.table, args.region)
    try:
        ledger = view.scoped(DynamoLedger(args.table, region=region), args.target)
        sweep = view.last_sweep(ledger)
        breaker = Breaker.from_item(ledger.get_item(BREAKER_KIND, BREAKER_KEY))
        decisions = view.sweep_decisions(ledger, sweep, policy, now)
        marks = view.load_marks(ledger)
        # Without the server-side family wildcard: one listing filtered in code works on every endpoint (emulators
        # ignore wildcards) and costs a human-run command little.
        live = (
            None
            if args.target
            else Ec2Reader(region, wildcard_type_filter=False).gpu_instances(
                policy.fleet, states=("pending", "running", "stopping", "stopped")
            )
        )
    except NoCredentialsError:
        raise UsageError("no AWS credentials: set AWS_PROFILE or the AWS_* variables") from None
    except (ClientError, BotoCoreError) as error:
        raise UsageError(f"ledger table {args.table}: {error}") from None
    rows = view.fleet_rows(live, decisions, marks, breaker, policy, now)
    if args.json:
        print(json.dumps(view.as_json(rows, sweep, breaker, args.target), indent=1))
    else:
        for line in view.render(rows, sweep, breaker, now):
            print(line)
    return 0
