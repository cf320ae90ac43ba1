"""The demo's owners answering warnings in Slack: each click signed as Slack signs it, POSTed to the ``interactions``
handler as its Function URL would be, and what it hands on (to itself, and Stop now to the function that stops) run
after its answer. Loaded by the package's hooks (``connect``, ``respond``, ``click_facts``) when the demo calls them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from typing import Any

from governor.adapters.aws import client
from governor.interactions.domain import BUTTON_KIND, KEEP_HOURS, STOP_NOW
from governor_cli.demo.capabilities.interactions.slack_app import (
    QueuedInvoker,
    buttons_in,
    buttons_of,
    click_request,
    drain,
    new_signing_secret,
    slack_user,
)
from governor_cli.demo.capture import SLACK_ACTIONS
from governor_cli.demo.hooks import provided
from governor_cli.demo.run import DEMO_DOMAIN, PEOPLE, DemoResult, LambdaContext, Simulation

#: The demo's Slack workspace, in the response URLs its clicks carry (Slack's host: see ``capture.slack_answers_to``).
SLACK_ACTIONS_PATH = "T0DEMO"


def endpoint(sim: Simulation, event: dict[str, Any]) -> dict[str, Any]:
    """The ``interactions`` handler as its Function URL or its own async invocation runs it; what it hands on
    asynchronously is queued (``QueuedInvoker``) instead of reaching Lambda, and run after it has answered."""
    from dataclasses import replace

    from governor.interactions import handler as interactions
    from governor.runtime import default_runtime

    os.environ.update(sim.stack.environment("interactions", sim.policy))
    default_runtime.cache_clear()
    queued: Any = sim.invoker  # the hand-over to the worker and the worker's own invocations: both queued
    aws = replace(interactions._aws(sim.trail.region), invoker=queued, handover=queued)
    with contextlib.redirect_stdout(sim.log):
        result = interactions.handle(event, default_runtime(), aws, LambdaContext("interactions"))
    sim.result.invocations["interactions"] += 1
    sim.result.results.append(("interactions", result))
    return result


def click(
    sim: Simulation, message: dict[str, Any], action_id: str, person: str, instance: str, token: str | None = None
) -> None:
    """Click one button of a posted message (of its actions block ``token``, else its first) as ``person``
    would in Slack, then let the async work run."""
    buttons = buttons_of(message)
    if buttons is None or sim.capture is None:
        return
    token = token or buttons[0]
    response_url = f"{SLACK_ACTIONS}{SLACK_ACTIONS_PATH}/{token[:8]}"  # Slack's host: see slack_answers_to
    request = click_request(message, token, action_id, slack_user(person), response_url, sim.now, sim.signing_secret)
    answer = endpoint(sim, request)
    results = drain(sim.invoker, lambda f, e: endpoint(sim, e) if f == "interactions" else sim.invoke(f, e))
    status = str(results[-1].get("status")) if results else f"HTTP {answer.get('statusCode')}"
    until = next((str(r["until"]) for r in results if r.get("until")), None)
    sim.result.clicks.append(
        {
            "button": action_id,
            "instance": instance,
            "person": person,
            "http": answer.get("statusCode"),
            "status": status,
            "at": sim.now.isoformat(),
            "until": until,
        }
    )


def respond(sim: Simulation) -> None:
    """As idle warnings with buttons arrive, their owners answer: "Keep 4 h" on the first, "Stop now" on the next
    (another instance, still running); then the demo clicks nothing more (``DemoOptions.clicks``: whether they do)."""
    if not sim.options.clicks:
        return
    if sim.options.organization:
        return  # Stop now runs the idle function in the hub's account (see member_ports): no clicks across accounts
    done = {str(c["button"]) for c in sim.result.clicks}
    if sim.capture is None or {KEEP_HOURS, STOP_NOW} <= done:
        return
    owners = {f"{p}@demo.example": p for p in PEOPLE.values()} | {p: p for p in PEOPLE.values()}
    clicked = {str(c["instance"]) for c in sim.result.clicks}
    for message, (token, ids) in [(m, b) for m in list(sim.capture.received) for b in buttons_in(m)]:
        if STOP_NOW not in ids:
            continue
        record = button_record(sim, token)
        person = owners.get(str(record.get("owner")))
        instance = str(record.get("resource"))
        if not person or instance in clicked or _state(sim, instance) != "running":
            continue
        if instance == sim.result.capacity_block:
            continue  # its warning says it is reported only (a prepaid block): its owner does not press Stop now
        if sim.eks is not None and instance == sim.eks.instance:
            continue  # the EKS node is left to the sweep: it drains it through its cluster (summary: "EKS node")
        button = KEEP_HOURS if KEEP_HOURS not in done else STOP_NOW
        if button == STOP_NOW and sim.spot.get(instance):
            continue  # Stop now on a Spot instance terminates it (Spot cannot be stopped): the demo stops one
        click(sim, message, button, person, instance, token)
        done.add(button)
        clicked.add(instance)
        if {KEEP_HOURS, STOP_NOW} <= done:
            break
    sim.route_findings()


def _state(sim: Simulation, instance: str) -> str:
    found = sim.ec2.describe_instances(InstanceIds=[instance])["Reservations"]
    return str(found[0]["Instances"][0]["State"]["Name"]) if found else "gone"


def button_record(sim: Simulation, token: str) -> dict[str, Any]:
    """What the notifier stored for a token (the demo reads the ledger to name the clicked instance)."""
    from boto3.dynamodb.types import TypeDeserializer

    item = (
        client("dynamodb")
        .get_item(TableName=sim.stack.ledger_table, Key={"pk": {"S": f"{BUTTON_KIND}#{token}"}, "sk": {"S": "item"}})
        .get("Item")
        or {}
    )
    return {k: TypeDeserializer().deserialize(v) for k, v in item.items()}


def connect(sim: Simulation) -> None:
    """The Slack app: its signing secret, as an operator stores it (docs/slack.md), the queue standing in for
    Lambda's asynchronous invoke, and the workspace's people (``users.lookupByEmail`` answers from it)."""
    sim.signing_secret = new_signing_secret()
    sim.invoker = QueuedInvoker()
    if sim.capture is not None:
        sim.capture.directory.update({f"{p}@{DEMO_DOMAIN}": slack_user(p) for p in PEOPLE.values()})
    name = sim.policy.interactions.signing_secret_name
    client("secretsmanager").create_secret(Name=name, SecretString=sim.signing_secret)


def click_facts(result: DemoResult) -> list[tuple[str, ...]]:
    """One summary line per button the demo clicked, with what came of it (from the ledger and the emulator)."""
    labels = {KEEP_HOURS: "Keep 4 h", STOP_NOW: "Stop now"}
    facts: list[tuple[str, ...]] = []
    for click in result.clicks:
        label = labels.get(str(click["button"]), str(click["button"]))
        who = f"{label} on {click['instance']} by {click['person']}"
        if click["button"] == KEEP_HOURS and click.get("until"):
            until = dt.datetime.fromisoformat(str(click["until"]).replace("Z", "+00:00"))
            kept = (
                "stopped while kept!"
                if provided("stopped_by_governor")(result, click["instance"], until.isoformat())
                else ("not stopped while kept")
            )
            outcome = f"{click['status']} until {until:%H:%M} UTC, {kept}"
        elif click["button"] == STOP_NOW:
            outcome = "stopped at once" if click["instance"] in result.stopped else str(click["status"])
        else:
            outcome = str(click["status"])
        facts.append(("Slack button clicked", f"{who}: {outcome}"))
    return facts
