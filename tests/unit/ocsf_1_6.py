"""OCSF 1.6.0 (the schema version the current Security Hub stores), for the attributes the Security Hub export writes:
each class's or object's required attributes and every attribute's type, and the enums the export uses.

Written from the published 1.6.0 schema (class ``detection_finding`` extending ``finding`` and ``base_event``, with
the ``cloud`` profile; objects ``metadata``, ``product``, ``finding_info``, ``cloud``, ``account``,
``resource_details``, ``remediation``). py-ocsf-models, the project's test-only OCSF models, stops at 1.5.0 (its
newest release, 0.10.0): this is what checks the 1.6.0 side. An attribute the export writes that 1.6.0 does not
define, a missing required one, a wrong type or an enum id 1.6.0 does not list is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VERSION = "1.6.0"

#: name -> (required attributes, {attribute: type}); a type is a scalar (``string_t``, ``integer_t``, ``long_t``,
#: ``timestamp_t``, ``boolean_t``, ``object`` for free-form), another entry's name, or a one-element list (an array).
SCHEMA: dict[str, tuple[frozenset[str], dict[str, Any]]] = {
    "detection_finding": (
        frozenset(
            {"activity_id", "category_uid", "class_uid", "finding_info", "metadata", "severity_id", "time", "type_uid"}
            | {"cloud"}  # the cloud profile makes it required
        ),
        {
            "activity_id": "integer_t",
            "activity_name": "string_t",
            "category_uid": "integer_t",
            "category_name": "string_t",
            "class_uid": "integer_t",
            "class_name": "string_t",
            "type_uid": "long_t",
            "type_name": "string_t",
            "severity_id": "integer_t",
            "severity": "string_t",
            "status_id": "integer_t",
            "status": "string_t",
            "status_detail": "string_t",
            "time": "timestamp_t",
            "message": "string_t",
            "metadata": "metadata",
            "finding_info": "finding_info",
            "cloud": "cloud",
            "resources": ["resource_details"],
            "unmapped": "object",
            "remediation": "remediation",
        },
    ),
    "metadata": (
        frozenset({"product", "version"}),
        {
            "version": "string_t",
            "product": "product",
            "event_code": "string_t",
            "uid": "string_t",
            "profiles": ["string_t"],
        },
    ),
    "product": (frozenset(), {"name": "string_t", "vendor_name": "string_t", "uid": "string_t"}),
    "finding_info": (
        frozenset({"uid"}),
        {
            "uid": "string_t",
            "title": "string_t",
            "desc": "string_t",
            "types": ["string_t"],
            "created_time": "timestamp_t",
            "first_seen_time": "timestamp_t",
        },
    ),
    "cloud": (frozenset({"provider"}), {"provider": "string_t", "region": "string_t", "account": "account"}),
    "account": (frozenset(), {"uid": "string_t", "name": "string_t", "type": "string_t", "type_id": "integer_t"}),
    "resource_details": (
        frozenset(),
        {
            "uid": "string_t",
            "type": "string_t",
            "region": "string_t",
            "cloud_partition": "string_t",
            "labels": ["string_t"],
        },
    ),
    "remediation": (frozenset({"desc"}), {"desc": "string_t"}),
}

#: The enums the export sets, id -> caption (the sibling ``*_name`` / caption attribute must match).
ENUMS: dict[str, dict[int, str]] = {
    "activity_id": {1: "Create", 2: "Update", 3: "Close"},
    "status_id": {1: "New", 2: "In Progress", 3: "Suppressed", 4: "Resolved", 5: "Archived", 6: "Deleted"},
    "severity_id": {0: "Unknown", 1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical", 6: "Fatal"},
    "account.type_id": {10: "AWS Account"},
}
_SIBLINGS = {"activity_id": "activity_name", "status_id": "status", "severity_id": "severity"}
_SCALARS = {"string_t": str, "integer_t": int, "long_t": int, "timestamp_t": int, "boolean_t": bool}


def _check(value: Any, kind: Any, path: str, errors: list[str]) -> None:
    if isinstance(kind, list):
        if not isinstance(value, list):
            errors.append(f"{path}: an array expected")
            return
        for n, item in enumerate(value):
            _check(item, kind[0], f"{path}[{n}]", errors)
    elif kind == "object":
        if not isinstance(value, Mapping):
            errors.append(f"{path}: an object expected")
    elif kind in _SCALARS:
        scalar = _SCALARS[kind]
        if not isinstance(value, scalar) or (scalar is int and isinstance(value, bool)):
            errors.append(f"{path}: {kind} expected, got {type(value).__name__}")
    else:
        _object(value, kind, path, errors)


def _object(value: Any, name: str, path: str, errors: list[str]) -> None:
    if not isinstance(value, Mapping):
        errors.append(f"{path}: a {name} object expected")
        return
    required, attributes = SCHEMA[name]
    errors += [f"{path}.{attr}: required by OCSF {VERSION}" for attr in sorted(required - set(value))]
    for attr, item in value.items():
        if attr not in attributes:
            errors.append(f"{path}.{attr}: not an attribute of {name} in OCSF {VERSION}")
        elif item is not None:
            _check(item, attributes[attr], f"{path}.{attr}", errors)


def problems(event: Mapping[str, Any]) -> list[str]:
    """Everything in ``event`` that OCSF 1.6.0's Detection Finding does not allow (empty: valid)."""
    errors: list[str] = []
    _object(event, "detection_finding", "event", errors)
    for enum, sibling in _SIBLINGS.items():
        listed = ENUMS[enum]
        if event.get(enum) not in listed:
            errors.append(f"event.{enum}: {event.get(enum)!r} is not in OCSF {VERSION}")
        elif sibling in event and event[sibling] != listed[event[enum]]:
            errors.append(f"event.{sibling}: {event[sibling]!r} does not name {enum} {event[enum]}")
    account = (event.get("cloud") or {}).get("account") or {}
    if "type_id" in account and account["type_id"] not in ENUMS["account.type_id"]:
        errors.append(f"event.cloud.account.type_id: {account['type_id']} is not an AWS account")
    if event.get("class_uid") != 2004 or event.get("category_uid") != 2:
        errors.append("event: not a Detection Finding (class 2004, category 2)")
    if event.get("type_uid") != 2004 * 100 + int(event.get("activity_id") or 0):
        errors.append("event.type_uid: must be class_uid * 100 + activity_id")
    if (event.get("metadata") or {}).get("version") != VERSION:
        errors.append(f"event.metadata.version: {(event.get('metadata') or {}).get('version')!r}, not {VERSION}")
    return errors
