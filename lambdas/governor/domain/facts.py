"""One fact, one figure, everywhere: what the governor knows about one resource, decided once per run.

Issue 48: the same instance was "unknown" in the findings, "dara" in the offenders' table and a role ARN in Slack; its
idle hours were priced at the session's price and its would-reclaim hours at Cost Explorer's average for the type;
an EKS node was "terminated" in Slack and "cordoned, drained, NodeClaim deleted" in the summary. Each surface worked
the fact out for itself. This module is the one place each fact is decided, and every surface renders what it says:

- **owner** (:class:`Owner`): the owner tag, else the creator (CloudTrail's RunInstances caller: the governor's
  creator tag, else the launch lifecycle recorded), else the caller of the call a finding is about, normalised by
  :func:`governor.domain.identity.normalise_owner` (one person, one name), with how it is known and the person's
  Slack user id when the policy's people name them;
- **price** (:class:`Price`): one rate per instance, with its named basis, in the order of truth
  (:func:`price_of`): the instance's own CUR 2.0 rate, else Cost Explorer's amortised cost for its type (On-Demand
  only: a type's average blends purchase options), else the price recorded with its usage session, else the price
  table (or the Price List API). Spend, idle spend, would-reclaim and "at stake" all use it;
- **action path** (:class:`ActionPath`): what would really run (EC2 stop or terminate, Auto Scaling scale-in,
  Kubernetes cordon / drain / NodeClaim delete or node-group scale-down, or nothing), in one set of words;
- **at stake** (:func:`per_day_text`): dollars a day, one unit and one format (``$1,573.08/day``).

Pure, and part of the shared domain (it imports only the shared domain): the report computes the record of every
resource of a run from the ledger (:func:`ledger_facts`); the notifier and Security Hub render the facts findings
carry.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import Field

from governor.domain.identity import UNKNOWN, normalise_owner
from governor.domain.model import Model
from governor.domain.times import parse_time

# --- owner ----------------------------------------------------------------------------------------------------------

#: How an owner is known, strongest first: a tag naming the owner (``fleet.owner_tag``, or the resource's own owner as
#: its capability records it: an access key's user), the creator (CloudTrail's RunInstances caller: the governor's
#: creator tag, else the launch lifecycle recorded), the caller of the API call a finding is about (who opened a
#: security group rule), or nothing.
OwnerProof = Literal["owner tag", "creator", "caller", "none"]
_RANK: dict[OwnerProof, int] = {"owner tag": 3, "creator": 2, "caller": 1, "none": 0}
#: What a surface says when nobody is known.
UNKNOWN_OWNER_TEXT = "unknown (no owner tag or recorded creator)"


def owner_name(value: object) -> str:
    """The one name a person is shown and counted under, on every surface (``identity.normalise_owner``)."""
    return normalise_owner(value)


def slack_user(owner: object, people: Mapping[str, str] | None) -> str | None:
    """The owner's Slack user id when the policy's people (address or name, lower case -> user id) name them: the
    address itself, else any address whose name is the owner's (``dara`` is ``dara@example.com``)."""
    if not people or not owner or owner_name(owner) == UNKNOWN:
        return None
    found = people.get(str(owner).strip().lower())
    if found:
        return found
    name = owner_name(owner)
    return next((user for who, user in sorted(people.items()) if owner_name(who) == name), None)


class Owner(Model):
    """Who owns a resource: one normalised name, how it is known, and what it was read from."""

    name: str = UNKNOWN
    proof: OwnerProof = "none"
    #: What the name was read from when that differs from it (a role ARN, an address).
    principal: str | None = None
    #: The person's Slack user id, when the policy's people name them.
    slack_user: str | None = None

    @property
    def known(self) -> bool:
        return self.name != UNKNOWN

    def text(self) -> str:
        """How a message names them: the name, or why nobody is named."""
        return self.name if self.known else UNKNOWN_OWNER_TEXT

    def mention(self) -> str:
        """How Slack names them: ``<@U123> (dara)`` when their Slack id is known (it notifies them), else the name."""
        return f"<@{self.slack_user}> ({self.name})" if self.slack_user and self.known else self.text()


def owner_of(value: object, proof: OwnerProof = "owner tag", people: Mapping[str, str] | None = None) -> Owner:
    """An :class:`Owner` from one raw value (a tag, an ARN, an address) and how it is known."""
    name = owner_name(value)
    if name == UNKNOWN:
        return Owner()
    raw = str(value).strip()
    return Owner(
        name=name,
        proof=proof,
        principal=raw if raw.lower() != name else None,
        slack_user=slack_user(raw, people),
    )


def strongest(candidates: Iterable[tuple[str, OwnerProof, object]], people: Mapping[str, str] | None = None) -> Owner:
    """The owner the best proof names; among equal proofs the latest (``(when, proof, value)``, ISO times)."""
    best: tuple[int, str, object] | None = None
    for when, proof, value in candidates:
        if owner_name(value) == UNKNOWN:
            continue
        key = (_RANK[proof], str(when or ""), value)
        if best is None or key[:2] >= best[:2]:
            best = key
    if best is None:
        return Owner()
    proof = next(p for p, rank in _RANK.items() if rank == best[0])
    return owner_of(best[2], proof, people)


# --- money ----------------------------------------------------------------------------------------------------------


def money(value: float) -> str:
    """US dollars with thousands separators and cents: ``$1,002.50``."""
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def per_day_text(usd_per_day: float | None) -> str:
    """Money at stake, one unit and one format on every surface: ``$1,573.08/day``; empty when unknown."""
    return "" if usd_per_day is None else f"{money(usd_per_day)}/day"


def per_hour_text(usd_per_hour: float | None) -> str:
    return "" if usd_per_hour is None else f"{money(usd_per_hour)}/h"


#: A price's basis, named the same way on every surface.
PriceBasis = Literal["CUR", "Cost Explorer amortised", "session", "list", "unpriced"]


class Price(Model):
    """What one hour of a resource costs, what that figure is (its basis) and where it came from (its source)."""

    usd_per_hour: float | None = None
    basis: PriceBasis = "unpriced"
    source: str = "unpriced"

    @property
    def priced(self) -> bool:
        return self.usd_per_hour is not None

    def per_day(self, units: float = 1.0) -> float | None:
        return None if self.usd_per_hour is None else round(self.usd_per_hour * 24 * units, 2)


class PriceSource(Protocol):
    """What :func:`price_of` asks of a price book (``governor.domain.costs.PriceBook``)."""

    @property
    def has_effective(self) -> bool: ...

    def effective_rate(self, instance_type: str, instance_id: str | None = None) -> tuple[float, str] | None: ...

    def listed(self, instance_type: str, lifecycle: str = "on-demand") -> tuple[float | None, str]: ...


#: Purchase options whose hours a per-type average (Cost Explorer's, the CUR table's) describes: it blends every
#: option of the type, and a Spot or Capacity Block hour is priced its own way (an instance's own CUR rate is its own).
_AVERAGED = frozenset({"on-demand", "", "none"})


def basis_of(source: str) -> PriceBasis:
    """The basis a price source's words name."""
    if source.startswith("CUR"):
        return "CUR"
    if source.startswith("Cost Explorer"):
        return "Cost Explorer amortised"
    if "recorded with the usage session" in source:
        return "session"
    return "unpriced" if source.startswith("unpriced") else "list"


def price_of(
    instance_id: str | None,
    instance_type: str | None,
    sessions: Sequence[Mapping[str, Any]],
    book: PriceSource | None,
    lifecycle: str | None = None,
) -> Price:
    """The one rate of an instance (or of one usage session, given alone), in the order of truth (module docstring)."""
    latest = max(sessions, key=lambda s: str(s.get("start", "")), default=None)
    lifecycle = str(lifecycle or (latest or {}).get("lifecycle") or "on-demand")
    kind = instance_type or str((latest or {}).get("instance_type") or "") or None
    if book is not None and kind and book.has_effective:
        found = book.effective_rate(kind, instance_id)
        if found is not None and (", this instance" in found[1] or lifecycle in _AVERAGED):
            return Price(usd_per_hour=found[0], basis=basis_of(found[1]), source=found[1])
    own = [s for s in sessions if s.get("price_per_hour") is not None]
    recorded = max(own, key=lambda s: str(s.get("start", "")), default=None)
    if recorded is not None:
        return Price(
            usd_per_hour=float(recorded["price_per_hour"]),
            basis="session",
            source=f"{lifecycle} price recorded with the usage session",
        )
    if book is not None and kind:
        per_hour, source = book.listed(kind, lifecycle)
        if per_hour is not None:
            return Price(usd_per_hour=per_hour, basis="list", source=source)
    return Price()


# --- what would really run ------------------------------------------------------------------------------------------

PathKind = Literal["stop", "terminate", "scale-in", "nodeclaim", "node-group", "drain", "report", "none"]
_PATHS: dict[str, tuple[str, str]] = {
    "stop": ("stopped (EC2 StopInstances)", "stop the instance"),
    "terminate": ("terminated (EC2 TerminateInstances)", "terminate the instance"),
    "scale-in": (
        "terminated through its Auto Scaling group, desired capacity lowered by one",
        "terminate it through its Auto Scaling group",
    ),
    "nodeclaim": (
        "cordoned and drained (PodDisruptionBudgets respected), then its Karpenter NodeClaim deleted",
        "cordon and drain the node, then delete its Karpenter NodeClaim",
    ),
    "node-group": (
        "cordoned and drained (PodDisruptionBudgets respected), then terminated in its node group, desired capacity "
        "lowered",
        "cordon and drain the node, then scale its node group down",
    ),
    "drain": (
        "cordoned and drained (PodDisruptionBudgets respected), then removed by its owner (Karpenter NodeClaim "
        "deleted, or terminated in its node group)",
        "cordon and drain the node, then remove it through its owner",
    ),
    "report": ("reported only (its capacity is paid for or owned by a cluster)", "nothing: report only"),
    "none": ("left alone", "nothing"),
}


class ActionPath(Model):
    """What the governor would really do to reclaim a resource, and through what."""

    kind: PathKind = "none"
    #: The Auto Scaling group, or the EKS cluster, it goes through.
    group: str | None = None

    def done(self) -> str:
        """Past participle with its mechanism: ``cordoned and drained ..., then its Karpenter NodeClaim deleted``."""
        words = _PATHS[self.kind][0]
        if self.group and self.kind in ("nodeclaim", "node-group", "drain"):
            return f"{words} (EKS cluster {self.group})"
        if self.group and self.kind == "scale-in":
            return words.replace("its Auto Scaling group", f"Auto Scaling group {self.group}")
        return words

    def short(self) -> str:
        """A title's few words: ``stopped``, ``terminated through Auto Scaling group X``, ``drained and removed (EKS
        cluster X)``."""
        if self.kind in ("nodeclaim", "node-group", "drain"):
            return "drained and removed" + (f" (EKS cluster {self.group})" if self.group else "")
        if self.kind == "scale-in":
            return "terminated through " + (
                f"Auto Scaling group {self.group}" if self.group else "its Auto Scaling group"
            )
        return {"stop": "stopped", "terminate": "terminated"}.get(self.kind, self.done())

    def would(self, enforced: bool = False) -> str:
        """``would be cordoned and drained ...`` (report-only), ``will be ...`` (enforced)."""
        if self.kind in ("report", "none"):
            return self.done()
        return f"{'will' if enforced else 'would'} be {self.done()}"

    def remedy(self) -> str:
        """The imperative a remediation starts with."""
        return _PATHS[self.kind][1]


def action_path(action: Mapping[str, Any] | None) -> ActionPath:
    """The path a reclaim (or the warning before one) takes, from the action as the ledger keeps it: its ``type``
    (``stop`` / ``terminate``; a warning's ``planned``), and ``via`` (``autoscaling``, ``kubernetes``), ``group``
    and, for a node, ``node_owner`` (``karpenter`` or ``managed_node_group``) when recorded."""
    if not action:
        return ActionPath()
    kind = str(action.get("planned") if action.get("type") == "warn" else action.get("type"))
    via, group = action.get("via"), action.get("group")
    if kind == "report":
        return ActionPath(kind="report")
    if kind not in ("stop", "terminate"):
        return ActionPath()
    if via == "kubernetes":
        owner = action.get("node_owner")
        path: PathKind = "nodeclaim" if owner == "karpenter" else "node-group" if owner else "drain"
        return ActionPath(kind=path, group=str(group) if group else None)
    if via == "autoscaling":
        return ActionPath(kind="scale-in", group=str(group) if group else None)
    return ActionPath(kind="stop" if kind == "stop" else "terminate")


# --- one resource ---------------------------------------------------------------------------------------------------

Status = Literal["running", "stopped", "active", "open", "unknown"]


class ResourceFacts(Model):
    """Everything a surface says about one resource in one run, decided once."""

    resource: str
    owner: Owner = Field(default_factory=Owner)  # factories: a default instance would build the model at import
    team: str = UNKNOWN
    instance_type: str | None = None
    gpus: int = 1
    #: How its capacity was bought (``governor.domain.capacity.Purchase``: on-demand, spot, capacity-block, ...).
    purchase: str = UNKNOWN
    price: Price = Field(default_factory=Price)
    #: Units its price is paid for (a reservation's unused slots; 1 for an instance).
    units: int = 1
    #: What it costs a day while it stays as it is (0 once stopped); None when unpriced or not billed by the hour.
    usd_per_day: float | None = None
    action: ActionPath = Field(default_factory=ActionPath)
    #: Where its GPU signals come from (``cloudwatch_agent``, ``cluster <name>``, ...), as the idle sweep recorded it.
    metric_source: str | None = None
    status: Status = "unknown"

    def row(self) -> dict[str, Any]:
        """Its line of the report's resources table (and resources.csv)."""
        return {
            "resource": self.resource,
            "owner": self.owner.name,
            "owner_proof": self.owner.proof,
            "team": self.team,
            "instance_type": self.instance_type or "",
            "purchase": self.purchase,
            "usd_per_hour": self.price.usd_per_hour,
            "price_basis": self.price.basis,
            "price_source": self.price.source,
            "usd_per_day": self.usd_per_day,
            "action_path": self.action.would(),
            "metric_source": self.metric_source or "",
            "status": self.status,
        }


RESOURCE_COLUMNS = (
    "resource",
    "owner",
    "owner_proof",
    "team",
    "instance_type",
    "purchase",
    "usd_per_hour",
    "price_basis",
    "price_source",
    "usd_per_day",
    "action_path",
    "metric_source",
    "status",
)

#: Ledger kinds read here (``governor.domain.fleet.LAUNCH_KIND``; the usage session's).
_SESSION, _LAUNCH = "session", "launch"
_RECLAIMS = ("stop", "terminate", "warn")


class _Seen:
    """What the ledger says about one resource, gathered in one pass."""

    def __init__(self) -> None:
        self.sessions: list[Mapping[str, Any]] = []
        self.owners: list[tuple[str, OwnerProof, object]] = []
        self.teams: list[tuple[str, str]] = []
        self.evidence: Mapping[str, Any] = {}
        self.evidence_at = ""
        self.path: tuple[str, Mapping[str, Any]] | None = None
        self.creators: set[str] = set()

    def owner_candidates(self) -> list[tuple[str, OwnerProof, object]]:
        """Every owner seen; a recorded owner that is the creator (no owner tag: the creator tag) counts as it."""
        return [
            (at, "creator" if proof == "owner tag" and owner_name(value) in self.creators else proof, value)
            for at, proof, value in self.owners
        ]

    def decision(self, item: Mapping[str, Any]) -> None:
        at = str(item.get("at", ""))
        evidence = item.get("evidence") or {}
        if evidence.get("owner"):
            self.owners.append((at, "owner tag", evidence["owner"]))
        if evidence.get("opened_by"):
            self.owners.append((at, "caller", evidence["opened_by"]))
        if evidence.get("team") and evidence["team"] != UNKNOWN:
            self.teams.append((at, str(evidence["team"])))
        if evidence.get("instance_type") and at >= self.evidence_at:
            self.evidence, self.evidence_at = evidence, at
        for action in item.get("actions") or []:
            if isinstance(action, Mapping):
                self.action(at, action)

    def action(self, at: str, action: Mapping[str, Any]) -> None:
        """An action's owner (as its capability recorded it), lifecycle's record of the RunInstances caller (the
        creator), and the reclaim path (a stop, terminate or warning's plan; the latest wins)."""
        if action.get("owner"):
            self.owners.append((at, "owner tag", action["owner"]))
        if action.get("item") == _LAUNCH and action.get("creator"):
            self.owners.append((at, "creator", action["creator"]))
            self.creators.add(owner_name(action["creator"]))
        if action.get("type") in _RECLAIMS and (self.path is None or at >= self.path[0]):
            self.path = (at, action)

    def session(self, item: Mapping[str, Any]) -> None:
        self.sessions.append(item)
        at = str(item.get("start", ""))
        proof: OwnerProof = "owner tag" if item.get("ownership_source") == "tag" else "creator"
        if item.get("creator"):
            self.creators.add(owner_name(item["creator"]))
        if item.get("owner"):
            self.owners.append((at, proof, item["owner"]))
        if item.get("team") and item["team"] != UNKNOWN:
            self.teams.append((at, str(item["team"])))


def _gather(items: Iterable[Mapping[str, Any]], end: dt.datetime | None) -> dict[str, _Seen]:
    seen: dict[str, _Seen] = defaultdict(_Seen)
    for item in items:
        kind = item.get("kind", "decision")
        if kind == _SESSION:
            seen[str(item.get("instance_id"))].session(item)
        elif kind == _LAUNCH and item.get("creator"):
            launched = seen[str(item.get("instance_id"))]
            launched.owners.append((str(item.get("at", "")), "creator", item["creator"]))
            launched.creators.add(owner_name(item["creator"]))
        elif kind == "decision" and item.get("resource"):
            at = parse_time(item.get("at"))
            if end is None or at is None or at < end:
                seen[str(item["resource"])].decision(item)
    return seen


def _status(seen: _Seen, end: dt.datetime | None) -> Status:
    latest = max(seen.sessions, key=lambda s: str(s.get("start", "")), default=None)
    if latest is None:
        return "active" if seen.evidence.get("unused_instances") is not None else "unknown"
    stopped = parse_time(latest.get("end"))
    return "stopped" if stopped is not None and (end is None or stopped <= end) else "running"


def reservation_price(evidence: Mapping[str, Any], book: PriceSource | None) -> Price:
    """One empty slot-hour of a reservation (the idle sweep's ``unused-capacity`` evidence): what the account pays for
    the type (an On-Demand Capacity Reservation is billed at the On-Demand rate, less any Savings Plan or RI that
    covers it) when the book has an effective rate, else the rate the sweep recorded; a Capacity Block's fee is
    prepaid and never reported by EC2, so only the rate its sweep recorded, if any. The finding's "at stake", the
    "Paid for, unused" table and the resource's record all use this."""
    kind = str(evidence.get("instance_type") or "")
    block = (evidence.get("purchase") or {}).get("kind") == "capacity-block"
    if not block and book is not None and kind and book.has_effective:
        found = book.effective_rate(kind)
        if found is not None:
            return Price(usd_per_hour=found[0], basis=basis_of(found[1]), source=found[1])
    per_hour = evidence.get("price_per_hour")
    source = str(evidence.get("price_source") or "unpriced")
    if per_hour is None:
        return Price()
    return Price(usd_per_hour=float(per_hour), basis=basis_of(source), source=source)


def reservation_per_day(evidence: Mapping[str, Any], book: PriceSource | None) -> float | None:
    """What a reservation's empty slots cost a day (:func:`reservation_price` x 24 x unused slots)."""
    return reservation_price(evidence, book).per_day(int(evidence.get("unused_instances") or 0))


def _price(resource: str, instance_type: str | None, seen: _Seen, book: PriceSource | None) -> Price:
    """A reservation's empty slots (:func:`reservation_price`); an instance's one rate (:func:`price_of`)."""
    if seen.evidence.get("unused_instances") is None:
        return price_of(resource, instance_type, seen.sessions, book)
    return reservation_price(seen.evidence, book)


def _facts(resource: str, seen: _Seen, book: PriceSource | None, end: dt.datetime | None, people: Any) -> ResourceFacts:
    evidence = seen.evidence
    latest = max(seen.sessions, key=lambda s: str(s.get("start", "")), default={})
    purchase = (evidence.get("purchase") or {}).get("kind") or latest.get("lifecycle") or UNKNOWN
    instance_type = evidence.get("instance_type") or latest.get("instance_type")
    status = _status(seen, end)
    units = int(evidence.get("unused_instances") or 1)
    price = _price(resource, instance_type, seen, book)
    per_day = 0.0 if status == "stopped" else price.per_day(units)
    teams = sorted(seen.teams)
    sources = (evidence.get("metric_sources") or {}).get("judged_by") or []
    return ResourceFacts(
        resource=resource,
        owner=strongest(seen.owner_candidates(), people),
        team=teams[-1][1] if teams else UNKNOWN,
        instance_type=str(instance_type) if instance_type else None,
        gpus=int(latest.get("gpus") or evidence.get("gpus") or 1),
        purchase=str(purchase),
        price=price,
        units=units,
        usd_per_day=per_day,
        action=action_path(seen.path[1] if seen.path else None),
        metric_source=", ".join(str(s) for s in sources) or None,
        status=status,
    )


def ledger_facts(
    items: Iterable[Mapping[str, Any]],
    book: PriceSource | None = None,
    end: dt.datetime | None = None,
    people: Mapping[str, str] | None = None,
) -> dict[str, ResourceFacts]:
    """The record of every resource the ledger knows, computed once from its usage sessions, launch records and
    decisions made before ``end``: the report renders these and nothing else about a resource."""
    return {
        resource: _facts(resource, seen, book, end, people)
        for resource, seen in sorted(_gather(items, end).items())
        if resource and resource != "None"
    }
