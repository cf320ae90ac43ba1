"""Lambda's 4 KB of environment variables, counted the way Lambda counts them: the variables as JSON.

Each value is a JSON string there, so every ``"`` and ``\\`` inside it costs an escape byte: a policy written as JSON
(``GOVERNOR_POLICY``) or the organisation fan-out settings (``GOVERNOR_FANOUT``) take about two bytes more for every
key and string they hold than their raw length. The guard used to budget the policy's raw bytes (3,072) and let a
policy through whose environment Lambda then refused at deploy time (a 164-entry ``namespace_teams``: 4,208 bytes).

What CloudFormation fills in at deploy time (a generated table or queue name, a queue URL, the account and region of
an environment-agnostic stack) counts at the longest it can deploy as: a generated name is ``<stack>-<logical
id>-<13 characters>``, cut to the service's limit. A value without a length model stops the synth, so nothing is
guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aws_cdk import CfnResource, Stack
from aws_cdk import aws_lambda as lambda_

from governor.policy import PolicyError
from infra.settings import LONGEST_REGION, SettingsError

#: Lambda refuses a function whose environment variables, as JSON, take more (AWS's "4 KB").
ENVIRONMENT_LIMIT = 4096
#: CloudFormation's generated physical names end in ``-`` and a random suffix of up to 13 characters.
_SUFFIX = 1 + 13
_PSEUDO = {"AWS::AccountId": 12, "AWS::Region": LONGEST_REGION, "AWS::Partition": 3, "AWS::URLSuffix": 13}
#: Resource type -> (its name property, the service's longest name) for a ``Ref`` that returns the name.
_NAMED = {
    "AWS::DynamoDB::Table": ("tableName", 255),
    "AWS::Events::EventBus": ("name", 256),
    "AWS::S3::Bucket": ("bucketName", 63),
    "AWS::Lambda::Function": ("functionName", 64),
}
#: (resource type, attribute) -> the attribute's length, for a ``Fn::GetAtt``. None is in a function's environment
#: today (the report's named query ids were, until it ran the SQL shipped with its code): one added needs its length.
_ATTRIBUTES: dict[tuple[str, str], int] = {}
#: Variables a deploy setting fills, not the policy: variable -> (the setting, what to change).
_SETTINGS = {
    "GOVERNOR_FANOUT": (
        "context organization.sweep_accounts",
        "list fewer accounts (ou_ids lists them at run time instead)",
    ),
}


class _Lengths:
    """The longest deployed length of each intrinsic a stack's values hold."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self._resources: dict[str, CfnResource] | None = None

    @property
    def resources(self) -> dict[str, CfnResource]:
        """Logical id -> resource, read once, at the first ``Ref`` to a resource."""
        if self._resources is None:
            stack = self.stack
            self._resources = {
                stack.resolve(stack.get_logical_id(node)): node
                for node in stack.node.find_all()
                if isinstance(node, CfnResource)
            }
        return self._resources

    def text(self, value: Any) -> str:
        """``value`` as a string of the length it deploys as (each unknown part written as that many ``x``)."""
        if isinstance(value, str):
            return value
        if isinstance(value, int | float):
            return json.dumps(value)
        if isinstance(value, dict) and len(value) == 1:
            ((name, argument),) = value.items()
            if name == "Ref":
                return "x" * self._ref(argument)
            if name == "Fn::GetAtt":
                return "x" * self._attribute(*argument)
            if name == "Fn::Join":
                separator, parts = argument
                return separator.join(self.text(part) for part in parts)
        raise SettingsError(f"no length model for {json.dumps(value)} in a function's environment: add one to "
                            "infra/environment.py")  # fmt: skip

    def _ref(self, target: str) -> int:
        if target in _PSEUDO:
            return _PSEUDO[target]
        resource = self.resources.get(target)
        kind = resource.cfn_resource_type if resource is not None else "?"
        if resource is not None and kind == "AWS::SQS::Queue":
            name = self._name(resource, target, "queueName", 80)
            return len("https://sqs.") + LONGEST_REGION + len(".amazonaws.com/") + 12 + 1 + name
        if resource is not None and kind in _NAMED:
            return self._name(resource, target, *_NAMED[kind])
        raise SettingsError(f"no length model for a Ref to {target} ({kind}) in a function's environment: add one to "
                            "infra/environment.py")  # fmt: skip

    def _attribute(self, logical_id: str, attribute: str) -> int:
        resource = self.resources.get(logical_id)
        kind = resource.cfn_resource_type if resource is not None else "?"
        if (kind, attribute) not in _ATTRIBUTES:
            raise SettingsError(
                f"no length model for Fn::GetAtt {logical_id}.{attribute} ({kind}) in a function's environment: add "
                "one to infra/environment.py"
            )
        return _ATTRIBUTES[(kind, attribute)]

    def _name(self, resource: CfnResource, logical_id: str, prop: str, longest: int) -> int:
        given = self.stack.resolve(resource._cfn_properties.get(prop))  # the L1 properties, as CloudFormation gets them
        if given is not None:
            return len(self.text(given))
        return min(len(self.stack.stack_name) + 1 + len(logical_id) + _SUFFIX, longest)


def variables(function: lambda_.Function) -> dict[str, Any]:
    """The function's environment variables as the template holds them (intrinsics for deploy-time values)."""
    environment = Stack.of(function).resolve(function.node.default_child._cfn_properties.get("environment"))  # type: ignore[union-attr]
    return dict((environment or {}).get("variables", {}))


def json_bytes(values: Mapping[str, str]) -> int:
    """Bytes of ``values`` as one JSON object, every escape included."""
    return len(json.dumps(dict(values), separators=(",", ":"), ensure_ascii=False).encode())


def environment_sizes(function: lambda_.Function, lengths: _Lengths | None = None) -> tuple[int, dict[str, int]]:
    """The function's environment as Lambda counts it, and each variable's share (name and value as JSON)."""
    lengths = lengths or _Lengths(Stack.of(function))
    deployed = {name: lengths.text(value) for name, value in variables(function).items()}
    shares = {name: json_bytes({name: value}) - 2 for name, value in deployed.items()}
    return json_bytes(deployed), shares


def check_environments(functions: Iterable[tuple[str, lambda_.Function, Iterable[str]]]) -> None:
    """Stop the synth, naming the setting to change, when a function's environment passes Lambda's 4 KB: ``functions``
    holds (name, function, the policy sections its environment carries)."""
    lengths: dict[str, _Lengths] = {}  # one per stack: its resources' logical ids are read once
    for name, function, sections in functions:
        stack = Stack.of(function)
        if stack.node.path not in lengths:
            lengths[stack.node.path] = _Lengths(stack)
        total, shares = environment_sizes(function, lengths[stack.node.path])
        if total <= ENVIRONMENT_LIMIT:
            continue
        largest = max(shares, key=shares.__getitem__)
        counted = f"{total:,} bytes as Lambda counts them (its variables as JSON, escapes included)"
        if largest in _SETTINGS:
            setting, advice = _SETTINGS[largest]
            raise SettingsError(
                f"{setting}: the {name} function's environment takes {counted}, more than Lambda's "
                f"{ENVIRONMENT_LIMIT:,}; {advice}"
            )
        raise PolicyError(
            f"policy sections {', '.join(sections)} take {shares.get('GOVERNOR_POLICY', 0):,} bytes for the {name} "
            f"function; Lambda allows 4 KB of environment variables and the function's take {counted}, more than "
            f"{ENVIRONMENT_LIMIT:,}: shorten pricing.prices, notifications.teams or a cluster's namespace_teams"
        )
