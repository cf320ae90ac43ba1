"""A simulated day of a GPU fleet, end to end, on the local emulator, through the handlers Lambda runs.

Every handler is invoked through its ``lambda_handler`` with the environment the Lambda factory gives it. Findings
travel as in the cloud: published to the ``governor`` bus, routed by an EventBridge rule, delivered to the notifier,
which posts them to a local Slack capture endpoint and sends email through the emulated SES; both are saved under
``out/``. What happened is also written as CloudTrail records under ``AWSLogs/...`` for the audit and the report.

One clock: the whole run (handlers, the emulator, the ledger, the report) sees the simulated time, which
``time-machine`` moves from the start of the simulated day to its end; nothing reads the wall clock.

With ``accounts`` x ``regions`` beyond 1 x 1 the same day runs in organisation mode: the fleet is dealt out over member
accounts and regions, each with its spoke role, and the hub's functions act there through it; ``for_each_target`` is
the one loop over those targets.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import io
import json
import logging
import math
import os
import secrets
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from governor.adapters.aws import client
from governor.domain.facts import per_day_text
from governor.policy import Policy
from governor.registry import REGISTRY
from governor_cli.demo.bootstrap import FUNCTIONS, LocalStack, create_shared
from governor_cli.demo.capture import (
    CLICK_ANSWERS,
    UPDATES,
    CaptureEndpoint,
    capture_endpoint,
    channel_of,
    slack_answers_to,
    slack_api_to,
)
from governor_cli.demo.emulator import running_emulator
from governor_cli.demo.hooks import defining, hooks, provided
from governor_cli.demo.trail import Principal, Trail
from governor_cli.sim.workload import SyntheticInstance, Workload, generate
from governor_cli.testing import events
from governor_cli.testing.capacity import forget_reservations, place, reserve

SECTIONS = REGISTRY.sections()
TEAMS = ("vision", "nlp", "speech", "research")
PEOPLE = {"vision": "ana", "nlp": "bo", "speech": "chen", "research": "dara"}
DEMO_AMI = "ami-0a1b2c3d4e5f60718"  # the emulator accepts any image id; a Deep Learning AMI in a real account
#: The demo people's mail domain (their addresses are ``<person>@demo.example``).
DEMO_DOMAIN = "demo.example"
Progress = Callable[[str], None]

# Organisation mode (``--accounts``/``--regions`` beyond 1 x 1): the governor stays in the emulator's default account
# and region (the hub: ledger, bus, notifier, report) and the fleet lives in member accounts, each with the spoke role
# the StackSet would create in every region (docs/organization.md).
HUB_ACCOUNT = "123456789012"
HUB_REGION = "us-east-1"
MEMBER_REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-southeast-2")
MAX_ACCOUNTS = 8
SPOKE_ROLE = "GovernorSpoke"
#: The role AWS Organizations creates in every account it creates: the demo's "people" work through it.
SETUP_ROLE = "OrganizationAccountAccessRole"


def swept_in_target() -> frozenset[str]:
    """Functions whose scheduled sweeps and CloudTrail checks the demo points at a member account itself (their
    scenario hooks' ``target_ports``, see ``member_ports``); the others pick the event's account themselves
    (``adapters.aws.member_target``)."""
    return frozenset(capability.name for capability, _ in defining("target_ports"))


def member_accounts(count: int) -> list[str]:
    """Member account ids 111111111111, 222222222222, ... (never the hub's)."""
    return [str(111111111111 * n) for n in range(1, count + 1)]


@dataclass(frozen=True)
class DemoOptions:
    """What to simulate. The defaults are the README's demo: 20 instances over 12 hours, swept every 15 minutes."""

    policy: Policy
    out: Path
    enforce: bool = False
    instances: int = 20
    hours: float = 12.0
    sweep_minutes: int = 15
    seed: int = 11
    port: int = 0
    progress: Progress | None = None
    #: Member accounts and regions the fleet is spread over; 1 x 1 is the single-account demo in the hub's account.
    accounts: int = 1
    regions: int = 1
    #: Click Keep 4 h and Stop now on two idle warnings, as their owners would (issue 22). An enforced run with clicks
    #: reclaims what the owners chose, so it no longer equals the report-only preview, which cannot know the clicks.
    clicks: bool = True
    #: Post with the Slack bot token to a channel (``notifications.slack_channel``: chat.postMessage, chat.update)
    #: instead of the webhook; the capture endpoint answers both as Slack does. The report still uses the webhook.
    slack_bot: bool = False
    #: Where the simulated day ends (None: the last whole hour before now). What a day shows depends on its hours:
    #: digests post at the whole hours ``notifications.digest_hours`` divides, so the docs' sample pins its end.
    end: dt.datetime | None = None

    @property
    def organization(self) -> bool:
        """More than one (account, region): organisation mode, the fleet in member accounts behind spoke roles."""
        return self.accounts * self.regions > 1


@dataclass
class Site:
    """One (account, region) of the simulated fleet, with the clients its own people use (not the governor's): in a
    member account, sessions on ``SETUP_ROLE``; in the single-account demo, the hub's shared clients as before."""

    account: str
    region: str
    member: bool = False
    trail: Trail = field(default_factory=Trail)
    instances: dict[str, SyntheticInstance] = field(default_factory=dict)
    spot: dict[str, bool] = field(default_factory=dict)
    launched: list[str] = field(default_factory=list)
    training_group: str = ""
    #: The KMS key the day's incidents switch rotation off on (the keys scenario's ``set_up``).
    kms_key: str = ""
    stopped: list[str] = field(default_factory=list)
    open_ingress: int = 0
    _clients: dict[str, Any] = field(default_factory=dict)
    _session: Any = None

    @property
    def name(self) -> str:
        return f"{self.account}/{self.region}"

    def client(self, service: str) -> Any:
        if not self.member:
            return client(service)
        if service not in self._clients:
            if self._session is None:
                self._session = setup_session(self.account, self.region)
            self._clients[service] = self._session.client(service, region_name=self.region)
        return self._clients[service]


def setup_session(account: str, region: str, role: str = SETUP_ROLE) -> Any:
    """A session in a member account, as an administrator has through the organisation's access role (moto maps
    assumed-role credentials to the role's account)."""
    import boto3

    answer = boto3.client("sts", region_name=HUB_REGION).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/{role}", RoleSessionName="demo-setup"
    )
    credentials = answer["Credentials"]
    return boto3.session.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=region,
    )


def demo_sites(options: DemoOptions) -> list[Site]:
    """The (account, region) targets: the hub's own account alone, or every member account in every region."""
    if not options.organization:
        return [Site(HUB_ACCOUNT, HUB_REGION)]
    regions = MEMBER_REGIONS[: options.regions]
    return [
        Site(account, region, member=True, trail=Trail(account=account, region=region))
        for account in member_accounts(options.accounts)
        for region in regions
    ]


def for_each_target(targets: Sequence[Site], work: Callable[[Site], None]) -> None:
    """The organisation fan-out of the demo: ``work`` for each (account, region), one after another, in process.

    This is the one place the demo loops over targets; the sweep fan-out (planner and per-target runner, issue 23
    item 4) replaces it at merge. One target's failure is not caught here: the demo is meant to stop on it.
    """
    for target in targets:
        work(target)


def create_spoke_roles(sites: Sequence[Site]) -> None:
    """``<SPOKE_ROLE>-<function>-<region>`` for every capability acting in members, in every member account, trusting
    the hub account, as the StackSet deploys them."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{HUB_ACCOUNT}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
    from governor.adapters.aws import spoke_role_name
    from governor.registry import REGISTRY

    acting = sorted(name for name, capability in REGISTRY.items() if capability.member_accounts)
    for site in sites:
        if site.member:
            for function in acting:
                site.client("iam").create_role(
                    RoleName=spoke_role_name(SPOKE_ROLE, function, site.region),
                    AssumeRolePolicyDocument=json.dumps(trust),
                )


def member_ports(function: str, runtime: Any, account: str, region: str, event_id: str | None) -> Any:
    """The adapters ``function`` acts through in a member account and region: exactly what its fan-out target
    builder gives a target message (``target_aws`` / ``target_adapters``, clients assuming the spoke role there).

    The demo plays each (account, region) in process (``for_each_target``) instead of through the SQS targets queue,
    so it asks the handler for a target's adapters directly, with the runtime's region set to the target's.
    """
    from dataclasses import replace

    builders: dict[str, Callable[[dict[str, Any], Any], Any]] = {c.name: ports for c, ports in defining("target_ports")}
    if function not in builders:
        raise ValueError(f"{function}: picks its account from the event itself")
    target = {"account": account, "region": region, "id": event_id}
    return builders[function](target, replace(runtime, region=region))


@dataclass
class LambdaContext:
    """The parts of the Lambda context object that Powertools reads."""

    function_name: str
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:governor-{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@dataclass
class DemoResult:
    """What the run did, for the summary table and the end-to-end test."""

    enforce: bool
    invocations: Counter[str] = field(default_factory=Counter)
    results: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    #: Instances the scenario stopped before the day began (a stopped GPU instance still billing its volumes): not
    #: "stopped in the emulator" by the day.
    stopped_beforehand: list[str] = field(default_factory=list)
    notified: list[dict[str, Any]] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    open_ingress: list[dict[str, Any]] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    #: The instance placed in a Capacity Block, and the one lent capacity by an interruptible reservation.
    capacity_block: str | None = None
    interruptible: str | None = None
    # Ground truth per real instance id (whether it was working, minute by minute), to judge every stop.
    truth: dict[str, SyntheticInstance] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    out: Path = Path("out")
    rotation_enabled: bool = False
    deactivated_keys: int = 0
    start: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    end: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    slack_messages: int = 0
    report_slack_messages: int = 0
    #: Slack messages per channel (webhook secret name), and the click answers that replaced messages in place.
    posts: Counter[str] = field(default_factory=Counter)
    #: The Slack Web API calls the governor made with the bot token (``users.lookupByEmail ana@…``), in order.
    slack_api_calls: list[str] = field(default_factory=list)
    report_channel: str = ""
    emails: int = 0
    #: The report's own email as SES took it: its size in bytes and its file under ``out/email/`` (issue 48).
    report_email_bytes: int = 0
    report_email_file: str = ""
    #: What the report email left out to stay within its budget ("the tables", "the chart"), if anything.
    report_email_left_out: tuple[str, ...] = ()
    failed_deliveries: int = 0
    delivery_errors: list[str] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    # Slack buttons the demo clicked: button, instance, person, what the governor answered, and when.
    clicks: list[dict[str, Any]] = field(default_factory=list)
    #: Organisation mode: per (account, region), the instances launched there and those stopped there (read back in
    #: that account), and the roles the governor assumed; empty in the single-account demo.
    sites: list[dict[str, Any]] = field(default_factory=list)
    roles_assumed: int = 0
    #: Organisation mode: instances the hub's own account holds at the end (none: the fleet is in the members).
    hub_instances: int = 0
    #: The EKS cluster's node and what its Kubernetes API saw (``DemoCluster.drained``); empty in organisation mode.
    eks: dict[str, Any] = field(default_factory=dict)


def enforcing(policy: Policy, on: bool) -> Policy:
    """The policy with every section's ``enforce`` switched on (``--enforce``) or left as it is."""
    if not on:
        return policy
    return policy.model_copy(
        update={name: getattr(policy, name).model_copy(update={"enforce": True}) for name in SECTIONS}
    )


def demo_policy(policy: Policy, enforce: bool) -> Policy:
    """What the simulation runs: ``enforcing(policy, enforce)``, with each capability's sections as its scenario hooks
    set them for the demo (``policy_sections``: the notifier always delivering, the demo's people in Slack, each
    team's budget), and the demo account's effective rates."""
    chosen = enforcing(policy, enforce)
    sections = {name: section for _, hook in defining("policy_sections") for name, section in hook(chosen).items()}
    # The demo's account buys GPU hours under a Savings Plan: savings are priced at what it pays (Cost Explorer's
    # amortised cost, answered by the emulator from SAVINGS_PLAN_DISCOUNT), not at list prices.
    pricing = chosen.pricing.model_copy(update={"effective_rates": "cost_explorer"})
    return chosen.model_copy(update={**sections, "pricing": pricing})


#: The channel the demo's bot token posts to with ``--slack-bot`` (the capture endpoint files it as ``bot:C…``).
DEMO_SLACK_CHANNEL = "C0DEMOGPUFLEET"

#: The demo's Capacity Block for ML and the interruptible reservation another account lends capacity from.
DEMO_BLOCK = "cr-0b10c4f0de0000001"
DEMO_LENT = "cr-01e470000000000a2"
#: An On-Demand Capacity Reservation nobody runs in (issue 38: reported with its cost a day).
DEMO_UNUSED = "cr-0dd0e5ed00000000a"
#: The demo account's Savings Plan: every GPU type's hours amortise to this share of its on-demand price.
SAVINGS_PLAN_DISCOUNT = 0.72
SAVINGS_PLAN_HOURS = 720.0


def savings_plan_account(endpoint: str, policy: Policy) -> None:
    """What Cost Explorer would answer for an account with a Savings Plan, queued on the emulator (moto tracks no
    cost; its ``/moto-api/static/ce/cost-and-usage-results`` endpoint is how its documentation says to seed it):
    one GetCostAndUsage result, in AWS's response shape, with each GPU type's amortised cost and running hours."""
    import requests

    groups = [
        {
            "Keys": [instance_type],
            "Metrics": {
                "AmortizedCost": {
                    "Amount": f"{entry.on_demand * SAVINGS_PLAN_DISCOUNT * SAVINGS_PLAN_HOURS:.4f}",
                    "Unit": "USD",
                },
                "UsageQuantity": {"Amount": f"{SAVINGS_PLAN_HOURS:.0f}", "Unit": "Hrs"},
            },
        }
        for instance_type, entry in sorted(policy.pricing.prices.items())
    ]
    result: dict[str, Any] = {
        "ResultsByTime": [{"Groups": groups, "Total": {}, "Estimated": False}],
        "DimensionValueAttributes": [],
    }
    answer = requests.post(
        f"{endpoint}/moto-api/static/ce/cost-and-usage-results", json={"results": [result]}, timeout=10
    )
    answer.raise_for_status()


def simulated_period(hours: float, now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    """The simulated day ends at the last whole hour before ``now`` (so it is a plausible, recent period)."""
    end = (now or dt.datetime.now(dt.UTC)).replace(minute=0, second=0, microsecond=0)
    return end - dt.timedelta(minutes=int(hours * 60)), end


class Simulation:
    """The simulated account: emulated resources, a clock, a trail, and a way to invoke each function."""

    def __init__(self, options: DemoOptions, stack: LocalStack, start: dt.datetime, clock: Any = None) -> None:
        self.options = options
        self.policy = demo_policy(options.policy, options.enforce)
        if options.slack_bot:  # the bot token is the demo's (interactions' scenario hooks set it)
            channel = self.policy.notifications.model_copy(update={"slack_channel": DEMO_SLACK_CHANNEL})
            self.policy = self.policy.model_copy(update={"notifications": channel})
        self.stack = stack
        self.sites = demo_sites(options)
        self.site = self.sites[0]
        self.result = DemoResult(enforce=options.enforce, out=options.out)
        self.clock = clock
        self.start = start
        self._now = start
        self.now = start
        self.synthetic_to_real: dict[str, str] = {}
        self.findings_queue = ""
        self.capture: CaptureEndpoint | None = None
        #: The demo's Slack app: its signing secret and the queue standing in for Lambda's asynchronous invoke, set by
        #: the scenario hooks that click its buttons (``connect``).
        self.signing_secret = ""
        self.invoker: Any = None
        self.log = io.StringIO()
        self.roles_assumed_before = client.roles_assumed  # the process's count: a run reports its own
        #: The EKS cluster (single-account demo only): a Karpenter GPU node read from DCGM through Prometheus, set up
        #: and read back by the idle scenario hooks (``capabilities.idle.eks.DemoCluster``); None without one.
        self.eks: Any = None

    # --- the current target: what the scripted day does happens in ``self.site`` -----------------------------------

    def _reservations(self, block_type: str) -> None:
        """The site's capacity reservations as DescribeCapacityReservations answers (moto lacks the call; see
        reserve()): the block its idle instance runs in, ending the day after the demo, and an On-Demand Capacity
        Reservation nobody launches into (2 x p4d.24xlarge, open, tagged to its owner): reported every day at the
        type's rate, never cancelled."""
        where = {"account": self.site.account, "region": self.site.region}
        zone = f"{self.site.region}a"
        ends = self.start + dt.timedelta(hours=self.options.hours + 24)
        reserve(
            {
                "CapacityReservationId": DEMO_BLOCK,
                "InstanceType": block_type,
                "AvailabilityZone": zone,
                "State": "active",
                "ReservationType": "capacity-block",
                "InstanceMatchCriteria": "targeted",
                "TotalInstanceCount": 1,
                "AvailableInstanceCount": 0,
                "EndDateType": "limited",
                "EndDate": ends,
            },
            **where,
        )
        reserve(
            {
                "CapacityReservationId": DEMO_UNUSED,
                "InstanceType": "p4d.24xlarge",
                "AvailabilityZone": zone,
                "State": "active",
                "ReservationType": "default",
                "InstanceMatchCriteria": "open",
                "TotalInstanceCount": 2,
                "AvailableInstanceCount": 2,
                "EndDateType": "unlimited",
                "Tags": [{"Key": "owner", "Value": f"{PEOPLE['nlp']}@demo.example"}, {"Key": "team", "Value": "nlp"}],
            },
            **where,
        )

    @property
    def trail(self) -> Trail:
        return self.site.trail

    @property
    def ec2(self) -> Any:
        return self.site.client("ec2")

    @property
    def instances(self) -> dict[str, SyntheticInstance]:
        return self.site.instances

    @property
    def spot(self) -> dict[str, bool]:
        return self.site.spot

    @property
    def training_group(self) -> str:
        return self.site.training_group

    @training_group.setter
    def training_group(self, value: str) -> None:
        self.site.training_group = value

    def first_in_account(self) -> bool:
        """The current target is its account's first region (IAM, being global, is set up and swept there only)."""
        return next(s for s in self.sites if s.account == self.site.account) is self.site

    def at(self, site: Site) -> Simulation:
        """Make ``site`` the current target (``for_each_target`` calls work with the site)."""
        self.site = site
        return self

    # --- plumbing -------------------------------------------------------------------------------------------------

    @property
    def now(self) -> dt.datetime:
        return self._now

    @now.setter
    def now(self, value: dt.datetime) -> None:
        """Moving the simulated clock moves it for everything in the process (handlers, emulator, ledger)."""
        self._now = value
        if self.clock is not None:
            self.clock.move_to(value)

    def say(self, text: str) -> None:
        if self.options.progress is not None:
            self.options.progress(text)

    def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        """Run one function's ``lambda_handler`` as Lambda would, with that function's environment."""
        from governor.runtime import default_runtime

        os.environ.update(self.stack.environment(function, self.policy))
        default_runtime.cache_clear()
        module = importlib.import_module(f"governor.{function}.handler")
        origin = str(event.get("account", ""))
        with contextlib.redirect_stdout(self.log):
            if function in swept_in_target() and self.options.organization and origin != HUB_ACCOUNT:
                runtime = default_runtime()  # configures organisation mode before the member clients are built
                region = str(event.get("region") or HUB_REGION)
                ports = member_ports(function, runtime, origin, region, event.get("id"))
                result: dict[str, Any] = module.handle(event, runtime, ports, LambdaContext(function))
            else:
                result = module.lambda_handler(event, LambdaContext(function))
        self.result.invocations[function] += 1
        self.result.results.append((function, result))
        return result

    def scheduled(self, detail: dict[str, Any] | None = None) -> dict[str, Any]:
        return events.scheduled(
            detail or {},
            account=self.trail.account,
            region=self.trail.region,
            time=self.now,
            resources=[f"arn:aws:scheduler:{HUB_REGION}:{HUB_ACCOUNT}:schedule/default/governor"],
        )

    def ec2_event(self, detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
        return events.envelope(
            detail_type,
            "aws.ec2",
            detail,
            account=self.trail.account,
            region=self.trail.region,
            time=self.now,
            resources=[f"arn:aws:ec2:{self.trail.region}:{self.trail.account}:instance/{detail['instance-id']}"],
        )

    def api_call(self, who: Principal, source: str, name: str, **kwargs: Any) -> None:
        """Record the call in the trail and deliver its EventBridge event to the functions whose rules match: those
        whose scenario hooks list the call in ``CLOUDTRAIL_CALLS``, in registry order."""
        record = self.trail.call(self.now, who, source, name, **kwargs)
        for capability, calls in defining("CLOUDTRAIL_CALLS"):
            if name in calls:
                self.invoke(capability.name, self.trail.envelope(record))

    def state_changed(self, change: dict[str, Any]) -> None:
        """An EC2 instance state-change event, delivered to every scenario hook's ``state_changed``."""
        for _, hook in defining("state_changed"):
            hook(self, change)

    def route_findings(self) -> None:
        """The bus rule delivered findings to a queue; hand each to the functions the registry has the governor bus
        trigger (those with scenario hooks), as their Lambda targets would."""
        targets = [c.name for c, _ in hooks() if any(t.kind == "bus" for t in c.triggers)]
        sqs = client("sqs")
        while True:
            batch = sqs.receive_message(QueueUrl=self.findings_queue, MaxNumberOfMessages=10).get("Messages", [])
            if not batch:
                return
            for message in batch:
                event = json.loads(message["Body"])
                event.setdefault("account", HUB_ACCOUNT)  # moto's bus-to-SQS delivery drops it; AWS sends it
                self.result.notified.append(event.get("detail", {}))
                for function in targets:
                    self.deliver(function, event)
                sqs.delete_message(QueueUrl=self.findings_queue, ReceiptHandle=message["ReceiptHandle"])

    def deliver(self, function: str, event: dict[str, Any]) -> None:
        """Invoke ``function`` as Lambda's asynchronous invocation would: a failed invocation is counted and parked in
        its DLQ (Lambda's on-failure destination), not allowed to stop the day."""
        try:
            result = self.invoke(function, event)
        except Exception as error:
            self.result.failed_deliveries += 1
            self.result.delivery_errors.append(f"{error.__class__.__name__}: {error}")
            client("sqs").send_message(QueueUrl=self.stack.dlq_urls[function], MessageBody=json.dumps(event))
            return
        undeliverable = result.get("undeliverable") or []
        self.result.failed_deliveries += len(undeliverable)
        self.result.delivery_errors.extend(str(u) for u in undeliverable)

    def connect_notifier(self, webhook_url: str) -> None:
        """The webhook secret (pointing at the capture endpoint) and a verified SES sender, as an operator sets up."""
        notifications = self.policy.notifications
        # One path per secret, so the capture endpoint tells the channels apart (posts per channel per day).
        client("secretsmanager").create_secret(
            Name=notifications.slack_secret_name, SecretString=f"{webhook_url}/{notifications.slack_secret_name}"
        )
        for team in notifications.teams.values():
            name = getattr(team, "slack_secret_name", None)
            if name and name != notifications.slack_secret_name:
                client("secretsmanager").create_secret(Name=name, SecretString=f"{webhook_url}/{name}")
        if notifications.email_sender:
            client("sesv2").create_email_identity(EmailIdentity=notifications.email_sender)
        bot = REGISTRY.slack_app(self.policy).bot_token_secret_name
        if bot:  # the Slack app's bot token; the capture endpoint answers its Web API calls (slack_api_to)
            client("secretsmanager").create_secret(Name=bot, SecretString=f"xoxb-demo-{secrets.token_hex(8)}")

    # --- the simulated account ------------------------------------------------------------------------------------

    def subscribe_notifier(self) -> None:
        """The stack's rule on the governor bus, with a queue standing in for the notifier's Lambda target."""
        sqs, bus = client("sqs"), client("events")
        self.findings_queue = sqs.create_queue(QueueName="governor-findings")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self.findings_queue, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        bus.put_rule(
            Name="governor-findings",
            EventBusName=self.stack.bus_name,
            EventPattern=json.dumps({"source": ["gpu-fleet-governor"], "detail-type": ["Governor Finding"]}),
        )
        bus.put_targets(Rule="governor-findings", EventBusName=self.stack.bus_name, Targets=[{"Id": "q", "Arn": arn}])

    def launch_fleet(self, workload: Workload, share: Sequence[int] | None = None) -> None:
        """Run each synthetic instance (those at ``share``, default all) in the current target and deliver its
        RunInstances call and running state."""
        image = DEMO_AMI
        self.training_group = self.ec2.create_security_group(GroupName="gpu-training", Description="training nodes")[
            "GroupId"
        ]
        spot_left = 3
        chosen = range(len(workload.instances)) if share is None else share
        # The team's last idle-kind instance runs in a Capacity Block for ML: prepaid, so the idle policy reports its
        # idle hours as paid for, unused and never stops it (moto launches nothing into a block; see place()). One
        # block in the demo, at a site that keeps another idle instance to reclaim (an organisation's small sites).
        idle_ones = [i for i in chosen if workload.instances[i].kind == "idle"]
        block_index = idle_ones[-1] if len(idle_ones) >= 2 and self.result.capacity_block is None else None
        for index, synthetic in ((i, workload.instances[i]) for i in chosen):
            team = TEAMS[index % len(TEAMS)]
            tags = {"team": team, "workload": synthetic.kind, "Name": f"{team}-{synthetic.kind}-{index}"}
            tags.update(self.policy.fleet.fleet_tags)  # the fleet's tags: the SendCommand grant requires them
            if index % 5 != 4:
                # The owner's address, as the people who own GPU boxes tag them: the notifier mentions them in Slack
                # (<@U…>, from interactions.slack_users) and the report counts them under their name.
                tags["owner"] = f"{PEOPLE[team]}@demo.example"
            spot = spot_left > 0 and synthetic.kind == "training"
            extra: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
            spot_left -= int(spot)
            launched = self.ec2.run_instances(
                ImageId=image,
                InstanceType=synthetic.instance_type,
                MinCount=1,
                MaxCount=1,
                SecurityGroupIds=[self.training_group],
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                ],
                **extra,
            )["Instances"][0]
            real = launched["InstanceId"]
            if index == block_index:
                place(real, "capacity-block", DEMO_BLOCK, account=self.site.account, region=self.site.region)
                self.result.capacity_block = real
                self._reservations(synthetic.instance_type)
            self.spot[real] = spot
            self.instances[real] = synthetic
            self.site.launched.append(real)
            self.synthetic_to_real[synthetic.id] = real
            self.result.kinds[real] = synthetic.kind
            self.result.truth[real] = synthetic
            who = Principal(PEOPLE[team], "AssumedRole", "ml-engineer") if index % 3 else Principal(PEOPLE[team])
            self.api_call(
                who,
                "ec2.amazonaws.com",
                "RunInstances",
                request={
                    "instancesSet": {"items": [{"imageId": image, "minCount": 1, "maxCount": 1}]},
                    "instanceType": synthetic.instance_type,
                    "tagSpecificationSet": {
                        "items": [
                            {"resourceType": "instance", "tags": [{"key": k, "value": v} for k, v in tags.items()]}
                        ]
                    },
                    **({"instanceMarketOptions": {"marketType": "spot"}} if spot else {}),
                },
                response={
                    "reservationId": launched.get("ReservationId", "r-0"),
                    "instancesSet": {
                        "items": [
                            {
                                "instanceId": real,
                                "instanceType": synthetic.instance_type,
                                "instanceState": {"code": 0, "name": "pending"},
                            }
                        ]
                    },
                },
            )
            self.state_changed(
                self.ec2_event("EC2 Instance State-change Notification", {"instance-id": real, "state": "running"})
            )

    def put_metrics(self, since: dt.datetime, until: dt.datetime) -> None:
        """The CloudWatch agent's one-minute samples for the minutes in [since, until); memory in MB, as the agent
        publishes ``nvidia_smi_memory_used``."""
        cloudwatch = self.site.client("cloudwatch")
        names = {
            "gpu_utilization": "nvidia_smi_utilization_gpu",
            "gpu_memory_used": "nvidia_smi_memory_used",
        }
        units = {"gpu_utilization": "Percent", "gpu_memory_used": "Megabytes"}
        for real, synthetic in self.instances.items():
            data = []
            first = int((since - self.start).total_seconds() // 60)
            last = int((until - self.start).total_seconds() // 60)
            for minute in range(max(first, 0), min(last, synthetic.minutes)):
                at = self.start + dt.timedelta(minutes=minute)
                for field_name, metric in names.items():
                    value = getattr(synthetic, field_name)[minute]
                    if value is not None:
                        data.append(
                            {
                                "MetricName": metric,
                                "Dimensions": [{"Name": "InstanceId", "Value": real}],
                                "Timestamp": at,
                                "Value": value,
                                "Unit": units[field_name],
                            }
                        )
            for chunk in range(0, len(data), 1000):
                cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[chunk : chunk + 1000])
        for _, hook in defining("metrics"):
            hook(self, since, until)
        _trim_emulated_metrics(
            until - dt.timedelta(minutes=self.policy.idle.window_minutes + 2 * self.options.sweep_minutes),
            self.site.account,
            self.site.region,
        )

    # --- the day --------------------------------------------------------------------------------------------------

    def events_at(self) -> dict[int, Callable[[], None]]:
        """Scripted incidents in the current target, by minute of the day: every scenario hook's ``incidents``."""
        return {minute: work for _, incidents in defining("incidents") for minute, work in incidents(self).items()}

    def announce_state_changes(self) -> None:
        """EC2 emits a state-change event when the governor stops or terminates an instance; lifecycle closes the usage
        session on it, so nothing is billed after the stop. A stopped instance's agent reports no more metrics. First,
        what the scenario hooks' own resources went through (``state_changes``: Karpenter terminating the EKS node)."""
        for _, hook in defining("state_changes"):
            hook(self)
        if not self.instances:
            return
        described = self.ec2.describe_instances(InstanceIds=list(self.instances))["Reservations"]
        for reservation in described:
            for instance in reservation["Instances"]:
                state = instance["State"]["Name"]
                if state in ("stopping", "stopped", "shutting-down", "terminated"):
                    real = instance["InstanceId"]
                    self.instances.pop(real, None)
                    final = "stopped" if state in ("stopping", "stopped") else "terminated"
                    change = self.ec2_event(
                        "EC2 Instance State-change Notification", {"instance-id": real, "state": final}
                    )
                    self.state_changed(change)

    def run_day(self) -> None:
        """Sweep every ``sweep_minutes`` on the simulated clock (each scenario hook's ``tick``); scripted incidents
        happen in between, in every target."""
        incidents = {site.name: self.at(site).events_at() for site in self.sites}
        step = self.options.sweep_minutes
        total = int(self.options.hours * 60)
        previous = self.start
        for minute in range(step, total + 1, step):
            self.say(
                f"simulated hour {math.ceil(minute / 60)} of {math.ceil(total / 60)} "
                f"({self.start + dt.timedelta(minutes=minute):%Y-%m-%d %H:%M} UTC)"
            )

            def tick(site: Site, minute: int = minute, since: dt.datetime = previous) -> None:
                self.at(site)
                for at in sorted(m for m in incidents[site.name] if minute - step < m <= minute):
                    self.now = self.start + dt.timedelta(minutes=at)
                    incidents[site.name][at]()
                self.now = self.start + dt.timedelta(minutes=minute)
                self.put_metrics(since, self.now)
                for _, hook in defining("tick"):
                    hook(self)
                self.announce_state_changes()

            for_each_target(self.sites, tick)
            previous = self.now
            self.route_findings()
            if self.now.minute == 0 and self.now.hour % self.policy.notifications.digest_hours == 0:
                self.post_digests()
            for _, hook in defining("respond"):
                hook(self)

        def close(site: Site) -> None:
            self.at(site)
            for _, hook in defining("close"):
                hook(self)

        for_each_target(self.sites, close)
        self.route_findings()
        if not (self.now.minute == 0 and self.now.hour % self.policy.notifications.digest_hours == 0):
            self.post_digests()  # the day closes: what is still held goes out, as the next tick would post it
        for _, hook in defining("respond"):
            hook(self)

    def post_digests(self) -> None:
        """The notifier's schedule (``notifications.digest_schedule``) ticks: each channel's digest of what was held
        back is posted (``governor.notifier.flush``)."""
        from governor_cli.testing.events import scheduled

        event = scheduled({"kind": "digest"}, time=self.now, account=HUB_ACCOUNT, region=HUB_REGION)
        for function in self.digest_functions:
            self.deliver(function, event)

    @property
    def digest_functions(self) -> list[str]:
        """The functions the registry gives the digest's schedule (``notifications.digest_schedule``)."""
        return [c.name for c, _ in hooks() if any(t.schedule == "notifications.digest_schedule" for t in c.triggers)]


def _trim_emulated_metrics(before: dt.datetime, account: str = HUB_ACCOUNT, region: str = HUB_REGION) -> None:
    """Emulator housekeeping: drop points no sweep will read again (moto scans every stored point per query)."""
    from moto.cloudwatch.models import cloudwatch_backends

    backend = cloudwatch_backends[account][region]
    cutoff = before.replace(tzinfo=None)
    backend.metric_data = [d for d in backend.metric_data if _naive(d.timestamp) >= cutoff]


def _naive(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=None) if value.tzinfo else value


@contextlib.contextmanager
def _quiet_powertools(stream: io.StringIO) -> Iterator[None]:
    """Handlers log JSON and emit EMF metrics to stdout in Lambda; the demo keeps them in out/lambda.log instead."""
    saved = {k: os.environ.get(k) for k in ("POWERTOOLS_TRACE_DISABLED", "POWERTOOLS_METRICS_DISABLED")}
    os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    from governor.observability import SERVICE

    handlers = logging.getLogger(SERVICE).handlers
    streams = [(h, h.setStream(stream)) for h in handlers if isinstance(h, logging.StreamHandler)]
    try:
        yield
    finally:
        for handler, previous in streams:
            handler.setStream(previous)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_demo(options: DemoOptions) -> DemoResult:
    """Start the emulator and the Slack capture endpoint, simulate the day on its own clock, audit the trail, render
    and deliver the report; the emulator and the endpoint are always stopped."""
    import time_machine

    options.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(options.out / "cloudtrail", ignore_errors=True)  # the demo's own trail from an earlier run
    shutil.rmtree(options.out / "email", ignore_errors=True)
    forget_reservations()  # an earlier run's in this process (tests run the demo several times)
    log = io.StringIO()
    start, end = simulated_period(options.hours, options.end)
    say = options.progress or (lambda _text: None)
    say("starting the local emulator")
    with (
        time_machine.travel(start, tick=False) as clock,
        _quiet_powertools(log),
        running_emulator(options.port),
        capture_endpoint(options.out / "slack") as capture,
        slack_answers_to(capture),
        slack_api_to(capture),
    ):
        _fresh_containers()
        sim = Simulation(options, create_shared(), start=start, clock=clock)
        sim.result.start, sim.result.end = start, end
        sim.log = log
        sim.subscribe_notifier()
        sim.connect_notifier(capture.url)
        sim.capture = capture
        for _, hook in defining("connect"):
            hook(sim)
        if options.organization:
            sim.stack.spoke_role = SPOKE_ROLE
            create_spoke_roles(sim.sites)
        where = f" in {len(sim.sites)} accounts and regions" if options.organization else ""
        say(f"emulator up; launching {options.instances} GPU instances{where}")
        workload = generate(options.instances, hours=options.hours, seed=options.seed, start=sim.start)

        def set_up(site: Site) -> None:
            share = None if len(sim.sites) == 1 else range(sim.sites.index(site), options.instances, len(sim.sites))
            sim.at(site).launch_fleet(workload, share)
            for _, hook in defining("set_up"):
                hook(sim)

        try:
            for _, hook in defining("start"):
                hook(sim)
            for_each_target(sim.sites, set_up)
            sim.run_day()
            sim.now = end
            say("reading back the accounts, the ledger and the dead-letter queues")
            _collect(sim)
        finally:
            for _, hook in defining("stop"):
                hook(sim)
            client.configure(None)  # organisation mode off again for whatever runs next in this process
            for name in ("GOVERNOR_SPOKE_ROLE", "GOVERNOR_HOME_ACCOUNT"):
                os.environ.pop(name, None)
        (options.out / "lambda.log").write_text(sim.log.getvalue(), encoding="utf-8")
        say("auditing the trail and rendering the report")
        if sim.policy.pricing.effective_rates == "cost_explorer":
            savings_plan_account(os.environ["AWS_ENDPOINT_URL"], sim.policy)
        for _, hook in defining("finish"):
            hook(sim)
        sim.result.emails = _save_emails(options.out / "email")  # the report's email went out in "finish"
        sim.result.slack_messages = len(capture.received)
        sim.result.posts = Counter(channel_of(path) for path in capture.paths)
        sim.result.slack_api_calls = list(capture.api_calls)
    return sim.result


def _fresh_containers() -> None:
    """Each run starts with cold Lambda containers: the handlers' per-container caches (clients bound to an earlier
    emulator's port, outboxes) are dropped, so a second demo in the same process talks to its own emulator."""
    for function in FUNCTIONS:
        module = importlib.import_module(f"governor.{function}.handler")
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == module.__name__:
                value.cache_clear()


def _patient(service: str) -> Any:
    """A client for the demo's own read-back at the end (the ledger scan is the emulator's slowest answer): on a busy
    machine it waits up to ten minutes instead of timing out after botocore's 60 s and retrying."""
    import boto3
    from botocore.config import Config

    return boto3.client(service, config=Config(read_timeout=600, retries={"max_attempts": 1}))


def _collect(sim: Simulation) -> None:
    """Read back what the emulated account looks like now, the ledger, the dead letters and the emails sent."""
    from governor_cli.commands.ledger import write_jsonl

    result = sim.result
    for _, hook in defining("collect"):
        hook(sim)
    if not sim.options.organization:
        described = _patient("ec2").describe_instances()["Reservations"]
        result.stopped = [
            i["InstanceId"]
            for r in described
            for i in r["Instances"]
            if i["State"]["Name"] in ("stopped", "stopping") and i["InstanceId"] not in result.stopped_beforehand
        ]
        group = _patient("ec2").describe_security_groups(GroupIds=[sim.training_group])["SecurityGroups"][0]
        result.open_ingress = group.get("IpPermissions", [])
        status = _patient("kms").list_keys()["Keys"]
        result.rotation_enabled = all(
            _patient("kms").get_key_rotation_status(KeyId=k["KeyId"])["KeyRotationEnabled"] for k in status
        )
        iam = _patient("iam")
        result.deactivated_keys = sum(
            1
            for user in iam.list_users()["Users"]
            for key in iam.list_access_keys(UserName=user["UserName"])["AccessKeyMetadata"]
            if key["Status"] == "Inactive"
        )
    else:
        result.rotation_enabled = True
        for_each_target(sim.sites, lambda site: _collect_site(sim, site))
        result.hub_instances = sum(len(r["Instances"]) for r in _patient("ec2").describe_instances()["Reservations"])
        result.roles_assumed = client.roles_assumed - sim.roles_assumed_before
    sqs = _patient("sqs")
    for function, url in sim.stack.dlq_urls.items():
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        count = int(attributes["Attributes"].get("ApproximateNumberOfMessages", 0))
        if count:
            result.dead_letters[function] = count
    table = _patient("dynamodb")
    items: list[dict[str, Any]] = []
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    for page in table.get_paginator("scan").paginate(TableName=sim.stack.ledger_table):
        items.extend({k: deserializer.deserialize(v) for k, v in item.items()} for item in page["Items"])
    result.decisions = [json.loads(json.dumps(i, default=_number)) for i in items]
    write_jsonl(result.decisions, sim.options.out / "ledger.jsonl")
    trail_root = sim.options.out / "cloudtrail"
    for site in sim.sites:
        site.trail.write(trail_root)
    result.emails = _save_emails(sim.options.out / "email")


def _collect_site(sim: Simulation, site: Site) -> None:
    """One member account and region read back in that account (its own session, not the governor's)."""
    result = sim.result
    ec2 = site.client("ec2")
    described = ec2.describe_instances()["Reservations"]
    site.stopped = [
        i["InstanceId"]
        for r in described
        for i in r["Instances"]
        if i["State"]["Name"] in ("stopped", "stopping") and i["InstanceId"] not in result.stopped_beforehand
    ]
    result.stopped += site.stopped
    group = ec2.describe_security_groups(GroupIds=[site.training_group])["SecurityGroups"][0]
    site.open_ingress = len(group.get("IpPermissions", []))
    result.open_ingress += group.get("IpPermissions", [])
    kms = site.client("kms")
    result.rotation_enabled = result.rotation_enabled and all(
        kms.get_key_rotation_status(KeyId=k["KeyId"])["KeyRotationEnabled"] for k in kms.list_keys()["Keys"]
    )
    iam = site.client("iam")
    result.deactivated_keys += sum(
        1
        for user in (iam.list_users()["Users"] if sim.at(site).first_in_account() else [])
        for key in iam.list_access_keys(UserName=user["UserName"])["AccessKeyMetadata"]
        if key["Status"] == "Inactive"
    )
    result.sites.append(
        {
            "account": site.account,
            "region": site.region,
            "launched": list(site.launched),
            "stopped": list(site.stopped),
            "open_ingress": site.open_ingress,
        }
    )


def _save_emails(folder: Path) -> int:
    """Every message the emulated SES accepted, as the ``.eml`` file a mail client opens (moto keeps them in memory)."""
    from moto.backends import get_backend

    sent = get_backend("ses")["123456789012"]["us-east-1"].sent_messages
    folder.mkdir(parents=True, exist_ok=True)
    for number, message in enumerate(sent, start=1):
        raw = getattr(message, "raw_data", None) or f"Subject: {message.subject}\n\n{message.body}"
        (folder / f"{number:04d}.eml").write_text(raw, encoding="utf-8")
    return len(sent)


def _number(value: Any) -> Any:
    return int(value) if value == int(value) else float(value)


def align(rows: list[tuple[str, ...]], right: tuple[int, ...] = ()) -> list[str]:
    """Rows as columns padded to their widest cell; the columns in ``right`` (numbers) are right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in rows
    ]


def posts_per_day(result: DemoResult) -> str:
    """Slack posts per channel per simulated day (docs/reports.md, "Quiet by design", sets the target), with the
    report's own posts and the in-place changes (click answers, ``chat.update``: no new post) said apart."""
    days = max((result.end - result.start).total_seconds() / 86_400, 1 / 24)
    parts = []
    for channel, count in sorted(result.posts.items()):
        if channel in (CLICK_ANSWERS, UPDATES):
            continue
        report = f", {result.report_slack_messages} of them the report" if channel == result.report_channel else ""
        parts.append(f"{channel} {count / days:,.1f}/day ({count} posts{report})")
    for in_place in (CLICK_ANSWERS, UPDATES):
        if result.posts.get(in_place, 0):
            parts.append(f"{result.posts[in_place]} {in_place}")
    return "; ".join(parts) or "no Slack posts"


def slack_api_facts(result: DemoResult) -> str:
    """What the bot token was used for: owners looked up by email (once per address per container) and clicking
    users resolved with users.info."""
    calls = Counter(call.split(" ", 1)[0] for call in result.slack_api_calls)
    looked = sorted(
        {call.split(" ", 1)[1] for call in result.slack_api_calls if call.startswith("users.lookupByEmail")}
    )
    if not calls:
        return "not used"
    parts = [f"{n} {method}" for method, n in sorted(calls.items())]
    return ", ".join(parts) + (f" ({', '.join(looked)})" if looked else "")


def summary_lines(result: DemoResult) -> list[str]:
    """The table ``make demo`` prints: per policy what it found and would do (report-only) or did (enforce); the idle
    figures and how they relate; what was delivered. Every figure comes from the ledger and the report."""
    verb = "done" if result.enforce else "would do (report-only)"
    by_policy: dict[str, Counter[str]] = {}
    found: Counter[str] = Counter()
    for item in result.decisions:
        if item.get("kind") != "decision":
            continue
        policy = str(item.get("policy"))
        if item.get("verdict") == "act":
            found[policy] += 1
        for action in item.get("actions") or []:
            if action.get("type") in ("record", "notify"):
                continue
            if action.get("enforced") or not result.enforce:
                by_policy.setdefault(policy, Counter())[str(action.get("type"))] += 1
    period = f"{result.start:%Y-%m-%d %H:%M} to {result.end:%Y-%m-%d %H:%M} UTC (simulated)"
    rows: list[tuple[str, ...]] = [("policy", "decisions to act", verb)]
    for policy in sorted(set(found) | set(by_policy)):
        actions = ", ".join(f"{n} {t}" for t, n in sorted(by_policy.get(policy, Counter()).items())) or "-"
        rows.append((policy, str(found[policy]), actions))
    table = align(rows, right=(1,))
    rule = "-" * max(len(line) for line in table)
    cost = result.report.get("cost", {})
    detected = float(cost.get("idle_gpu_hours_detected", 0))
    billed = float(cost.get("gpu_hours_total", 0))
    billed_usd = float(cost.get("cost_total_usd", 0))
    if result.enforce:
        hours, usd = float(cost.get("idle_gpu_hours_reclaimed", 0)), float(cost.get("savings_usd", 0))
        idle_rows: list[tuple[str, ...]] = [
            ("idle GPU-hours detected", f"{detected:,.1f}", "", "judged idle while running (paid for)"),
            ("reclaimed", f"{hours:,.1f}", f"${usd:,.2f}", f"stopped or terminated {cost.get('idle_actions', 0)}"),
            ("GPU-hours billed", f"{billed:,.1f}", f"${billed_usd:,.2f}", f"{billed + hours:,.1f} without the stops"),
        ]
    else:
        hours, usd = float(cost.get("would_reclaim_gpu_hours", 0)), float(cost.get("would_save_usd", 0))
        idle_rows = [
            ("idle GPU-hours detected", f"{detected:,.1f}", "", "judged idle while running (paid for)"),
            ("  before the stop decisions", f"{max(detected - hours, 0):,.1f}", "", "paid for in an enforced run too"),
            (
                "  after them: would reclaim",
                f"{hours:,.1f}",
                f"${usd:,.2f}",
                f"would stop {cost.get('idle_would_act', 0)} instance(s)",
            ),
            ("GPU-hours billed", f"{billed:,.1f}", f"${billed_usd:,.2f}", f"{billed - hours:,.1f} if enforced"),
        ]
    sources = sorted(set((cost.get("price_sources") or {}).values()))
    if sources:
        idle_rows.append(("  priced at", "", "", "; ".join(sources)))
    paid_unused = float(cost.get("paid_unused_gpu_hours", 0))
    if paid_unused:
        idle_rows.append(("paid for, unused (reserved)", f"{paid_unused:,.1f}", "", "Capacity Blocks: never stopped"))
    for row in (cost.get("paid_unused") or {}).get("rows", []):
        if str(row.get("instance_id", "")).startswith("(none") and row.get("usd_per_day") is not None:
            idle_rows.append(
                (
                    f"  unused reservation {row['reservation_id']}",
                    f"{float(row['idle_gpu_hours']):,.1f}",
                    per_day_text(float(row["usd_per_day"])),
                    f"{row['instance_type']} {row['instance_id'][1:-1]}, owner {row.get('owner') or '?'}",
                )
            )
    dead = ", ".join(f"{name} {count}" for name, count in sorted(result.dead_letters.items())) or "none"
    facts: list[tuple[str, ...]] = [
        ("period", period),
        (
            "handler invocations",
            f"{sum(result.invocations.values())} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(result.invocations.items()))
            + ")",
        ),
        ("findings routed to the notifier", str(len(result.notified))),
        (
            "held for the channel's digest",
            f"{provided('digest_held')(result)} (notifications.immediate: what is not due), "
            f"in {provided('digests_posted')(result)} digest post(s)",
        ),
        (
            "delivered",
            f"{result.slack_messages} Slack messages ({result.report_slack_messages} of them the report), "
            f"{result.emails} emails; failed: {result.failed_deliveries}",
        ),
        ("posts per channel per day", posts_per_day(result)),
        ("Slack Web API (bot token)", slack_api_facts(result)),
        ("dead-letter queues", dead),
        (
            "instances stopped in the emulator",
            f"{len(result.stopped)}"
            + (f" ({', '.join(sorted(result.kinds.get(i, '?') for i in result.stopped))})" if result.stopped else ""),
        ),
        (
            "world-open or CIDR rules left",
            f"{len(result.open_ingress)} on the training group" + ("s" if len(result.sites) > 1 else ""),
        ),
        *provided("click_facts")(result),
        *provided("eks_facts")(result),
        *provided("money_facts")(result),
        *provided("report_facts")(result),
        ("messages", f"{result.out}/slack/*.json, {result.out}/email/*.eml"),
        ("ledger, trail", f"{result.out}/ledger.jsonl, {result.out}/cloudtrail/"),
        (
            "the same report again",
            f"governor report --logs {result.out}/cloudtrail --ledger {result.out}/ledger.jsonl "
            f"--inputs {result.out}/inputs.json --out DIR (the period, policy and rates above: the same figures)",
        ),
    ]
    if result.sites:
        facts.insert(
            7, ("spoke role sessions", f"{result.roles_assumed} AssumeRole calls (per invocation, account and region)")
        )
        facts.insert(8, ("Slack buttons", "not clicked across accounts (Stop now acts in the hub's account only)"))
    lines = [rule, *table[:1], rule, *table[1:], rule]
    lines += align(idle_rows, right=(1, 2))
    lines.append(
        '(each figure is defined once in docs/idle.md, "Idle figures"; GPU-hours, and dollars at each instance\'s one '
        "rate: its price_basis in report.json resources)"
    )
    lines.append(rule)
    if result.sites:
        lines += account_lines(result)
        lines.append(rule)
    lines += align(facts)
    return lines


def account_figures(result: DemoResult) -> list[dict[str, Any]]:
    """Per (account, region): decisions to act, spend, idle figures, instances launched and stopped there (the hook
    attributing the ledger's decisions to their accounts: ``account_figures``)."""
    figures: list[dict[str, Any]] = provided("account_figures")(result)
    return figures


def reclaimed_key(enforce: bool) -> str:
    return "idle_gpu_hours_reclaimed" if enforce else "would_reclaim_gpu_hours"


def account_lines(result: DemoResult) -> list[str]:
    """The per-account table of the organisation demo, with a total row equal to the figures above it."""
    reclaim = "reclaimed" if result.enforce else "would reclaim"
    rows: list[tuple[str, ...]] = [
        ("account", "region", "instances", "to act", "GPU-h billed", "spend", "idle GPU-h", reclaim, "$", "stopped")
    ]
    figures = account_figures(result)
    total: dict[str, float] = dict.fromkeys(("instances", "decisions_to_act", "stopped", "hours", "usd"), 0)
    for f in figures:
        hours = f["reclaimed_gpu_hours"] if result.enforce else f["would_reclaim_gpu_hours"]
        rows.append(
            (
                f["account"],
                f["region"] + (" (hub)" if f["hub"] else ""),
                str(f["instances"]),
                str(f["decisions_to_act"]),
                f"{f['gpu_hours']:,.1f}",
                f"${f['cost_usd']:,.2f}",
                f"{f['idle_gpu_hours']:,.1f}",
                f"{hours:,.1f}",
                "" if result.enforce else f"${f['would_save_usd']:,.2f}",
                str(f["stopped"]),
            )
        )
        for key in ("instances", "decisions_to_act", "gpu_hours", "cost_usd", "idle_gpu_hours", "stopped"):
            total[key] = total.get(key, 0) + f[key]
        total["hours"] += hours
        total["usd"] += f["would_save_usd"]
    # The report's own totals (the figures above the table): the rows are rounded to the cent, their sum may not be.
    cost = result.report.get("cost") or {}
    rows.append(
        (
            "all accounts",
            "",
            str(int(total["instances"])),
            str(int(total["decisions_to_act"])),
            f"{float(cost.get('gpu_hours_total', total['gpu_hours'])):,.1f}",
            f"${float(cost.get('cost_total_usd', total['cost_usd'])):,.2f}",
            f"{float(cost.get('idle_gpu_hours_detected', total['idle_gpu_hours'])):,.1f}",
            f"{float(cost.get(reclaimed_key(result.enforce), total['hours'])):,.1f}",
            "" if result.enforce else f"${float(cost.get('would_save_usd', total['usd'])):,.2f}",
            str(int(total["stopped"])),
        )
    )
    table = align(rows, right=(2, 3, 4, 5, 6, 7, 8, 9))
    return [table[0], *table[1:-1], table[-1]]


__all__ = ["FUNCTIONS", "DemoOptions", "DemoResult", "account_figures", "for_each_target", "run_demo", "summary_lines"]
