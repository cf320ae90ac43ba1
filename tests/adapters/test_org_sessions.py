"""Organisation mode at run time (issue 23): the hub acts in the event's account through the spoke role, on moto.

moto keeps resources per account and lets STS assume roles across accounts, so an instance in account B is only
visible (and only acted on) with the spoke role's credentials in B. moto does not evaluate IAM: who may assume the
spoke role is tested on the template with the repository's policy evaluator (tests/infra/test_organization.py).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.aws import Organization, client, member_target, session_name
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.spot import handler as spot
from governor_cli.demo.bootstrap import LocalStack, create_shared
from tests.adapters.org_accounts import account_session, spoke_role
from tests.adapters.test_spot_moto import Deployed, LambdaContext, event
from tests.adapters.test_spot_recovery import REGION, Fleet

HUB, MEMBER = "123456789012", "222222222222"
TAGS = {"owner": "ana", "team": "vision", "gpu-fleet": "true"}


def launch(ec2: Any) -> str:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    launched = ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        InstanceMarketOptions={"MarketType": "spot"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in TAGS.items()]}],
    )
    return str(launched["Instances"][0]["InstanceId"])


@pytest.fixture
def org(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    with mock_aws():
        client.cache_clear()
        local = create_shared(REGION)
        monkeypatch.setenv("IDEMPOTENCY_TABLE", local.idempotency_table)
        member = account_session(MEMBER, REGION)
        spoke_role(member, "spot", REGION, HUB)
        client.configure(Organization("GovernorSpoke", HUB, "spot"))
        yield local
        client.configure(None)
    client.cache_clear()


def test_a_warning_in_account_b_is_handled_in_account_b_only(org: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    member = account_session(MEMBER, REGION)
    in_member = launch(member.client("ec2"))
    (in_hub,) = Fleet().launch(tags={"governor:checkpoint-command": "train"})
    deployed = Deployed(org, enforce=True)
    monkeypatch.setattr(spot, "default_runtime", lambda: deployed.runtime)
    warning = event("interruption-warning.json", in_member, account=MEMBER, id="warn/b:1")

    result = spot.handle(warning, deployed.runtime, spot.default_ports(warning), LambdaContext())

    assert result["status"] == "acted" and result["checkpoint"]["delivered"]
    (sent,) = member.client("ssm").list_commands()["Commands"]
    assert sent["InstanceIds"] == [in_member]
    assert boto3.client("ssm", region_name=REGION).list_commands()["Commands"] == []  # nothing in the hub account
    assert deployed.runtime.ledger.get_item("interruption", in_member) is not None  # one ledger, in the hub
    (decision,) = deployed.runtime.ledger.query_kind("decision")
    assert (decision["account"], decision["region"], decision["resource"]) == (MEMBER, REGION, in_member)
    # The hub's own instance is not reachable under account B's name: the event's account decides where to act.
    stray = event("interruption-warning.json", in_hub, account=MEMBER, id="warn-b-2")
    assert spot.handle(stray, deployed.runtime, spot.default_ports(stray), LambdaContext())["status"] == "ignored"
    assert boto3.client("ssm", region_name=REGION).list_commands()["Commands"] == []


def test_an_event_from_the_hub_account_uses_the_shared_clients(org: LocalStack) -> None:
    before = client.roles_assumed
    assert client("ec2", REGION, account=HUB) is client("ec2", REGION)
    assert client("ec2", REGION, account=None) is client("ec2", REGION)
    assert client.roles_assumed == before


def test_the_hub_accounts_other_region_goes_through_its_spoke_role(org: LocalStack) -> None:
    """Issue 32's open end: the hub's roles are granted in the hub's region only; in the hub account's other regions
    the StackSet's second group deploys the spoke roles, and the runtime acts through them as in any member."""
    other = "eu-west-1"
    spoke_role(boto3.Session(), "spot", other, HUB)
    client.configure(Organization("GovernorSpoke", HUB, "spot", REGION))
    before = client.roles_assumed
    assert client("ec2", REGION, account=HUB) is client("ec2", REGION)  # the hub's own region: its own role
    assert client.roles_assumed == before
    assert client("ec2", other, account=HUB) is not client("ec2", other)
    client("ec2", other, account=HUB).describe_instances()  # built on first use: assumes the spoke role
    assert client.roles_assumed == before + 1
    assert member_target({"account": HUB, "region": other, "id": "e-1"}) == (HUB, other, "e-1")
    assert member_target({"account": HUB, "region": REGION, "id": "e-2"}) is None


def test_stop_acts_on_the_instance_in_account_b_and_not_in_a(org: LocalStack) -> None:
    member = account_session(MEMBER, REGION)
    in_member = launch(member.client("ec2"))
    in_hub = launch(boto3.client("ec2", region_name=REGION))
    assert Ec2Reader(REGION, account=MEMBER).instance(in_hub) is None
    Ec2Actions(REGION, account=MEMBER).stop(in_member)
    state = member.client("ec2").describe_instances(InstanceIds=[in_member])
    assert state["Reservations"][0]["Instances"][0]["State"]["Name"] in {"stopping", "stopped"}
    hub_state = boto3.client("ec2", region_name=REGION).describe_instances(InstanceIds=[in_hub])
    assert hub_state["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def test_credentials_are_cached_per_account_and_region_until_near_expiry(org: LocalStack) -> None:
    before = client.roles_assumed
    ec2 = client("ec2", REGION, account=MEMBER, event_id="e1")
    assert client("ssm", REGION, account=MEMBER, event_id="e2") is not ec2
    assert client("ec2", REGION, account=MEMBER, event_id="e3") is ec2
    assert client.roles_assumed == before + 1  # one AssumeRole for both services
    client("ec2", "eu-west-1", account=MEMBER)
    assert client.roles_assumed == before + 2  # another region, another session (the role is regional)
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2)
    for key, (credentials, _) in list(client._credentials.items()):
        client._credentials[key] = (credentials, soon)
    for key, (built, _) in list(client._foreign.items()):
        client._foreign[key] = (built, soon)
    assert client("ec2", REGION, account=MEMBER) is not ec2
    assert client.roles_assumed == before + 3  # renewed before expiry


def test_without_organization_mode_every_account_gets_the_shared_client(org: LocalStack) -> None:
    client.configure(None)
    before = client.roles_assumed
    assert client("ec2", REGION, account=MEMBER) is client("ec2", REGION)
    assert client.roles_assumed == before


@pytest.mark.parametrize("event_id", ["warn/b:1", "a" * 200, "", "évènement 1", "6f1c-4c1e_x=y,z.w@q"])
def test_session_names_follow_the_sts_rules(event_id: str) -> None:
    name = session_name(event_id)
    assert re.fullmatch(r"[A-Za-z0-9_+=,.@-]{2,64}", name)
    assert name.startswith("governor-")


def test_lifecycle_reads_and_tags_in_the_events_account(org: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    from governor.lifecycle import handler as lifecycle

    member = account_session(MEMBER, REGION)
    in_member = launch(member.client("ec2"))
    home = lifecycle.Adapters(reader=Ec2Reader(REGION), tagger=Ec2Actions(REGION), prices=None)  # type: ignore[arg-type]
    monkeypatch.setattr(lifecycle, "default_capabilities", lambda: home)
    state_change = {"id": "sc-1", "account": MEMBER, "region": REGION, "detail": {"instance-id": in_member}}
    assert lifecycle.capabilities_for({**state_change, "account": HUB}) is home
    caps = lifecycle.capabilities_for(state_change)
    assert caps.reader.instance(in_member) is not None and home.reader.instance(in_member) is None
    caps.tagger.tag(in_member, {"governor:owner": "ana"})
    tags = member.client("ec2").describe_tags(Filters=[{"Name": "resource-id", "Values": [in_member]}])["Tags"]
    assert {"Key": "governor:owner", "Value": "ana"} in [{"Key": t["Key"], "Value": t["Value"]} for t in tags]


@pytest.mark.parametrize("account", ["not-an-account", 222222222222, "", None, "2222222222221"])
def test_a_malformed_account_acts_at_home(org: LocalStack, account: object) -> None:
    from governor.adapters.aws import member_target

    assert member_target({"id": "x", "account": account, "region": REGION}) is None
    assert member_target("not an event") is None


def test_a_world_open_rule_in_account_b_is_revoked_in_account_b(
    org: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spoke forwards account B's AuthorizeSecurityGroupIngress; the hub's network function re-reads the group
    and revokes the rule in B through the spoke role (before, it looked the group up in the hub's own account, found
    nothing and recorded "no longer exists")."""
    from governor.network import handler as network
    from governor.policy import parse_policy
    from governor.runtime import Runtime
    from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
    from tests.adapters.test_network_aws import authorize, live_rules, new_group

    member_ec2 = account_session(MEMBER, REGION).client("ec2")
    _, group = new_group(member_ec2)
    forwarded = {**authorize(member_ec2, group), "account": MEMBER}
    ledger = MemoryLedger()
    runtime = Runtime(
        parse_policy({"network": {"enforce": True, "scope": "all"}}), ledger, MemorySink(), MemoryDeadLetters(), REGION
    )
    monkeypatch.setattr(network, "default_runtime", lambda: runtime)
    monkeypatch.delenv("IDEMPOTENCY_TABLE")

    network.lambda_handler(forwarded, LambdaContext())  # type: ignore[arg-type]

    left = live_rules(member_ec2, group)
    assert ("tcp", 22, "0.0.0.0/0") not in left and ("tcp", 443, "::/0") not in left
    assert ("tcp", 22, "10.0.0.0/8") in left  # the compliant rule from the same call stays
    decisions = [d for _, d in ledger.decisions]
    assert any(d.resource == group and d.verdict == "act" for d in decisions)
