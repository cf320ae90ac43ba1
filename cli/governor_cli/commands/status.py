"""``governor status --stack NAME``: is a deployed governor working, in one account and region? Read-only.

Like ``kubectl get`` or ``sky status``, one line per thing an operator would check after ``cdk deploy`` and any day
after: the stack's state; each function present, its last invocation and errors in the last 24 hours; each schedule
enabled; each dead-letter queue empty; each alarm not in ALARM; GPU instances running vs reporting GPU metrics (the
CloudWatch agent installed and publishing); the Slack webhook secret present; the SES sender verified and whether
the account is still in the SES sandbox; the idle circuit breaker; the last report's time.

Exit 0 when healthy, 1 when degraded (each degraded line says why), 2 on bad input (an unknown stack, no
credentials, no region). Each resource is read on its own: one still being created (CloudFormation lists it without a
physical id), failed, deleted by a rollback or gone is its own line saying so, and hides nothing else.

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
        """The terminal line: names and messages come from AWS, so they go through the terminal's one escape."""
        from governor.domain.escape import terminal_text

        mark = {OK: "ok      ", DEGRADED: "DEGRADED", INFO: "info    "}[self.state]
        return f"{mark} {self.area:<10} {terminal_text(self.subject)}: {terminal_text(self.reason)}"


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


#: Error codes that mean the resource the stack names is not there (deleted, rolled back, never created).
MISSING = frozenset(
    {
        "ResourceNotFoundException",
        "ResourceNotFound",
        "NotFoundException",
        "NoSuchBucket",
        "QueueDoesNotExist",
        "AWS.SimpleQueueService.NonExistentQueue",
    }
)


def _guard(area: str, subject: str, probe: Callable[[], list[Check]]) -> list[Check]:
    """Run ``probe``; an AWS error becomes a degraded line naming the resource and why, never a traceback."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return probe()
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        message = error.response.get("Error", {}).get("Message", "")
        if code in MISSING:
            return [Check(area, subject, DEGRADED, f"missing ({code}: {message})")]
        return [Check(area, subject, DEGRADED, f"cannot read ({code}: {message})")]
    except BotoCoreError as error:
        return [Check(area, subject, DEGRADED, f"cannot read ({error})")]


def absent(resource: dict[str, Any]) -> str | None:
    """Why a stack resource has nothing to read (still being created, failed, deleted by a rollback), or None.

    CloudFormation lists a resource before it exists: without a ``PhysicalResourceId`` while it is being created."""
    status = str(resource.get("ResourceStatus") or "")
    reason = resource.get("ResourceStatusReason")
    because = f": {reason}" if reason else ""
    if not resource.get("PhysicalResourceId"):
        return f"not created ({status or 'no physical id yet'}{because})"
    if status == "CREATE_FAILED" or status.startswith("DELETE_"):
        return f"missing ({status}{because})"
    return None


def each(area: str, resources: Iterable[dict[str, Any]], read: Callable[[dict[str, Any]], Check]) -> list[Check]:
    """One line per resource, each read on its own: one that is missing or unreadable never hides the others."""
    checks: list[Check] = []
    for resource in resources:
        why = absent(resource)
        if why is not None:
            checks.append(Check(area, str(resource.get("LogicalResourceId", "?")), DEGRADED, why))
            continue
        checks += _guard(area, _subject(area, resource), lambda r=resource: [read(r)])  # type: ignore[misc]
    return checks


def _subject(area: str, resource: dict[str, Any]) -> str:
    physical = str(resource["PhysicalResourceId"])
    return physical.rsplit("/", 1)[-1] if area == "dlq" else physical


def _resources(aws: Aws, stack: str) -> list[dict[str, Any]]:
    pages = aws("cloudformation").get_paginator("list_stack_resources").paginate(StackName=stack)
    return [resource for page in pages for resource in page["StackResourceSummaries"]]


def _of(resources: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return sorted((r for r in resources if r.get("ResourceType") == kind), key=lambda r: r["LogicalResourceId"])


def stack_state(aws: Aws, stack: str) -> tuple[list[Check], dict[str, str]]:
    (described,) = aws("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    status = described["StackStatus"]
    healthy = status.endswith("_COMPLETE") and "ROLLBACK" not in status and "DELETE" not in status
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    return [Check("stack", stack, OK if healthy else DEGRADED, status)], outputs


def functions(aws: Aws, resources: list[dict[str, Any]], now: datetime) -> list[Check]:
    found = _of(resources, "AWS::Lambda::Function")
    if not found:
        return [Check("function", "-", DEGRADED, "the stack has no function")]
    names = [str(r["PhysicalResourceId"]) for r in found if absent(r) is None]
    series: dict[str, tuple[list[datetime], list[float]]] = {}
    unread: list[Check] = _guard("function", "metrics", lambda: _metrics(aws, names, now, series))

    def read(resource: dict[str, Any]) -> Check:
        name = str(resource["PhysicalResourceId"])
        state = aws("lambda").get_function(FunctionName=name)["Configuration"].get("State", "Active")
        stamps, invocations = series.get(f"i{names.index(name)}", ([], []))
        _, errors = series.get(f"e{names.index(name)}", ([], []))
        ran = [t for t, v in zip(stamps, invocations, strict=False) if v > 0]
        last = f"last invoked {max(ran):%Y-%m-%d %H:%M} UTC" if ran else "not invoked in 24 h"
        error_count = int(sum(errors))
        if state != "Active":
            return Check("function", name, DEGRADED, f"state {state}")
        if unread:
            return Check("function", name, OK, f"{state}; invocations and errors unread (see the metrics line)")
        if error_count:
            return Check("function", name, DEGRADED, f"{error_count} errors in 24 h; {last}")
        return Check("function", name, OK, f"{int(sum(invocations))} invocations, no errors in 24 h; {last}")

    return each("function", found, read) + unread


def _metrics(
    aws: Aws, names: list[str], now: datetime, series: dict[str, tuple[list[datetime], list[float]]]
) -> list[Check]:
    """Invocations and errors of every function over 24 hours, in as few GetMetricData calls as fit (500 queries)."""
    queries = [
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
        for index, name in enumerate(names)
        for prefix, metric in (("i", "Invocations"), ("e", "Errors"))
    ]
    for start in range(0, len(queries), 500):
        result = aws("cloudwatch").get_metric_data(
            MetricDataQueries=queries[start : start + 500], StartTime=now - timedelta(hours=24), EndTime=now
        )
        for item in result["MetricDataResults"]:
            series[item["Id"]] = (item.get("Timestamps", []), item.get("Values", []))
    return []


def schedules(aws: Aws, resources: list[dict[str, Any]]) -> list[Check]:
    def read(resource: dict[str, Any]) -> Check:
        name = str(resource["PhysicalResourceId"])
        schedule = aws("scheduler").get_schedule(Name=name)
        state = schedule.get("State", "ENABLED")
        where = schedule.get("ScheduleExpression", "")
        return Check("schedule", name, OK if state == "ENABLED" else DEGRADED, f"{state} {where}".strip())

    return each("schedule", _of(resources, "AWS::Scheduler::Schedule"), read)


def queues(aws: Aws, resources: list[dict[str, Any]]) -> list[Check]:
    def read(resource: dict[str, Any]) -> Check:
        url = str(resource["PhysicalResourceId"])
        attributes = aws("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        depth = int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
            attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
        )
        name = url.rsplit("/", 1)[-1]
        if depth:
            reason = f"{depth} message{'' if depth == 1 else 's'} waiting: governor dlq list --queue-url {url}"
            return Check("dlq", name, DEGRADED, reason)
        return Check("dlq", name, OK, "empty")

    dead = [
        r
        for r in _of(resources, "AWS::SQS::Queue")
        if "Dlq" in r["LogicalResourceId"] or "Dead" in r["LogicalResourceId"]
    ]
    return each("dlq", dead, read)


def alarms(aws: Aws, resources: list[dict[str, Any]]) -> list[Check]:
    found = _of(resources, "AWS::CloudWatch::Alarm")
    wanted = [str(r["PhysicalResourceId"]) for r in found if absent(r) is None]
    states: dict[str, str] = {}

    def describe() -> list[Check]:
        for start in range(0, len(wanted), 100):
            for alarm in aws("cloudwatch").describe_alarms(AlarmNames=wanted[start : start + 100])["MetricAlarms"]:
                states[alarm["AlarmName"]] = alarm["StateValue"]
        return []

    unread = _guard("alarm", "*", describe)

    def read(resource: dict[str, Any]) -> Check:
        name = str(resource["PhysicalResourceId"])
        state = states.get(name)
        if unread:
            return Check("alarm", name, DEGRADED, "state unread (see the line below)")
        if state is None:
            return Check("alarm", name, DEGRADED, "missing (no such alarm)")
        return Check("alarm", name, DEGRADED if state == "ALARM" else OK, state)

    return each("alarm", found, read) + unread


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
        str(r["PhysicalResourceId"])
        for r in _of(resources, "AWS::S3::Bucket")
        if "Reports" in r["LogicalResourceId"] and absent(r) is None
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
    # Each area reads each of its resources on its own (``each``): a half-created or rolled-back stack shows every
    # resource that is there and says which are not, and why.
    checks += functions(aws, resources, now)
    checks += schedules(aws, resources)
    checks += queues(aws, resources)
    checks += alarms(aws, resources)
    checks += _guard("gpu", "instances", lambda: gpu_agents(aws, policy))
    checks += notifications(aws, policy)
    ledger = outputs.get("LedgerTableName") or next(
        (
            str(r["PhysicalResourceId"])
            for r in _of(resources, "AWS::DynamoDB::Table")
            if r["LogicalResourceId"].startswith("SharedLedger") and absent(r) is None
        ),
        None,
    )
    checks += _guard("breaker", "idle", lambda: breaker(aws, ledger))
    checks += _guard("report", "*", lambda: last_report(aws, resources, now))
    return checks


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from governor.domain.escape import terminal_text
    from governor.policy import PolicyError, resolve_policy
    from governor_cli.aws_access import failure, resolve_region
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
    region = resolve_region(args.region)
    aws = Aws(region)
    try:
        checks = stack_checks(aws, args.stack, policy, datetime.now(UTC))
    except (ClientError, BotoCoreError) as error:
        raise failure(error, f"stack {args.stack} in {region}") from None
    degraded = [c for c in checks if c.state == DEGRADED]
    if args.json:
        print(json.dumps({"stack": args.stack, "region": region, "healthy": not degraded,
                          "checks": [asdict(c) for c in checks]}, indent=1))  # fmt: skip
    else:
        for check in checks:
            print(check.line())
        verdict = f"degraded: {len(degraded)} of {len(checks)} checks" if degraded else f"healthy: {len(checks)} checks"
        print(f"{terminal_text(args.stack)} in {region}: {verdict}")
    return 1 if degraded else 0


def fleet(args: argparse.Namespace, policy: Any) -> int:
    """The fleet view: ledger (marks, last sweep, breaker) plus, in one account, the live GPU instances."""
    from botocore.exceptions import BotoCoreError, ClientError

    from governor.adapters.ec2 import Ec2Reader
    from governor.adapters.ledger import DynamoLedger
    from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, Breaker
    from governor_cli import fleet_status as view
    from governor_cli.aws_access import failure
    from governor_cli.commands.ledger import table_region

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
    except (ClientError, BotoCoreError) as error:
        raise failure(error, f"ledger table {args.table}") from None
    rows = view.fleet_rows(live, decisions, marks, breaker, policy, now)
    if args.json:
        print(json.dumps(view.as_json(rows, sweep, breaker, args.target), indent=1))
    else:
        for line in view.render(rows, sweep, breaker, now):
            print(line)
    return 0
