"""A small IAM policy evaluator over a synthesized template, for proving what a role can and cannot do.

It resolves CloudFormation intrinsics to concrete ARNs (account 123456789012, us-east-1), collects every identity
policy attached to a role, and evaluates a request the way IAM does for one account: an explicit Deny wins, else an
Allow whose action, resource and conditions all match, else an implicit deny. Supported: Action/NotAction,
Resource/NotResource, ``*``/``?`` wildcards, String(Not)Equals, String(Not)Like, ForAllValues:/ForAnyValue:
qualifiers, Bool, Null, Arn(Not)Like/Equals, ...IfExists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

ACCOUNT = "123456789012"
REGION = "us-east-1"
PSEUDO = {
    "AWS::AccountId": ACCOUNT,
    "AWS::Region": REGION,
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "GpuFleetGovernor",
}


def _arn_for(logical_id: str, resource: dict[str, Any]) -> str:
    kind = resource["Type"]
    props = resource.get("Properties", {})
    name = logical_id.lower()
    if kind == "AWS::DynamoDB::Table":
        return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{props.get('TableName', logical_id)}"
    if kind == "AWS::S3::Bucket":
        return f"arn:aws:s3:::{name}"
    if kind == "AWS::KMS::Key":
        return f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{logical_id}"
    if kind == "AWS::SQS::Queue":
        return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{logical_id}"
    if kind == "AWS::SNS::Topic":
        return f"arn:aws:sns:{REGION}:{ACCOUNT}:{logical_id}"
    if kind == "AWS::Lambda::Function":
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"
    if kind == "AWS::Events::EventBus":
        return f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{props.get('Name', logical_id)}"
    if kind == "AWS::IAM::Role":
        return f"arn:aws:iam::{ACCOUNT}:role/{logical_id}"
    if kind == "AWS::Logs::LogGroup":
        return f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{logical_id}:*"
    if kind == "AWS::SecretsManager::Secret":
        return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{logical_id}-AbCdEf"
    return f"arn:aws:unknown:{REGION}:{ACCOUNT}:{logical_id}"


def _ref_value(logical_id: str, resource: dict[str, Any]) -> str:
    kind = resource["Type"]
    props = resource.get("Properties", {})
    if kind == "AWS::S3::Bucket":
        return logical_id.lower()
    if kind == "AWS::SQS::Queue":
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{logical_id}"
    if kind in ("AWS::DynamoDB::Table",):
        return str(props.get("TableName", logical_id))
    if kind in ("AWS::IAM::Role", "AWS::Lambda::Function", "AWS::KMS::Key"):
        return logical_id
    return _arn_for(logical_id, resource)


def resolve(value: Any, resources: dict[str, dict[str, Any]]) -> Any:
    """Intrinsics to plain values: Ref, Fn::GetAtt (Arn, Name, Url), Fn::Join, Fn::Select, Fn::Split, Fn::Sub."""
    if isinstance(value, list):
        return [resolve(v, resources) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            if arg in PSEUDO:
                return PSEUDO[arg]
            return _ref_value(arg, resources[arg]) if arg in resources else arg
        if key == "Fn::GetAtt":
            target, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            resource = resources[target]
            if attribute == "Arn" or attribute.endswith("Arn"):
                return _arn_for(target, resource)
            if attribute == "QueueUrl":
                return _ref_value(target, resource)
            return f"{target}.{attribute}"
        if key == "Fn::Join":
            separator, parts = arg
            return separator.join(str(resolve(p, resources)) for p in parts)
        if key == "Fn::Select":
            index, items = arg
            return resolve(items, resources)[int(index)]
        if key == "Fn::Split":
            separator, text = arg
            return str(resolve(text, resources)).split(separator)
        if key == "Fn::Sub":
            text = arg if isinstance(arg, str) else arg[0]
            return re.sub(r"\$\{([^}]+)\}", lambda m: PSEUDO.get(m.group(1), m.group(1)), text)
    return {k: resolve(v, resources) for k, v in value.items()}


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _pattern(text: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text), re.S)


def wildcard_match(pattern: str, value: str, *, case_sensitive: bool = True) -> bool:
    flags = 0 if case_sensitive else re.IGNORECASE
    return re.fullmatch(_pattern(pattern).pattern, value, flags) is not None


@dataclass(frozen=True)
class Request:
    """One API request: ``ec2:StopInstances`` on an ARN, with the condition keys IAM would see."""

    action: str
    resource: str = "*"
    context: dict[str, Any] = field(default_factory=dict)


def _condition_holds(operator: str, key: str, expected: Any, context: dict[str, Any]) -> bool:
    qualifier = ""
    if ":" in operator:
        qualifier, operator = operator.split(":", 1)
    if_exists = operator.endswith("IfExists")
    operator = operator.removesuffix("IfExists")
    wanted = [str(v) for v in _as_list(expected)]
    present = key in context
    if operator == "Null":
        return (not present) == (wanted[0].lower() == "true")
    if not present:
        if qualifier == "ForAllValues" or if_exists:
            return True
        return operator.startswith(("StringNot", "ArnNot"))
    actual = [str(v) for v in _as_list(context[key])]

    def one(value: str) -> bool:
        if operator in ("StringEquals", "ArnEquals"):
            return value in wanted
        if operator == "StringEqualsIgnoreCase":
            return value.lower() in {w.lower() for w in wanted}
        if operator in ("StringLike", "ArnLike"):
            return any(wildcard_match(w, value) for w in wanted)
        if operator in ("StringNotEquals", "ArnNotEquals"):
            return value not in wanted
        if operator in ("StringNotLike", "ArnNotLike"):
            return not any(wildcard_match(w, value) for w in wanted)
        if operator == "Bool":
            return value.lower() in {w.lower() for w in wanted}
        raise NotImplementedError(operator)

    if qualifier == "ForAllValues":
        return all(one(v) for v in actual)
    if qualifier == "ForAnyValue":
        return any(one(v) for v in actual)
    return any(one(v) for v in actual)


def statement_matches(statement: dict[str, Any], request: Request) -> bool:
    if "Action" in statement:
        if not any(wildcard_match(a, request.action, case_sensitive=False) for a in _as_list(statement["Action"])):
            return False
    elif any(wildcard_match(a, request.action, case_sensitive=False) for a in _as_list(statement.get("NotAction"))):
        return False
    if "Resource" in statement:
        if not any(wildcard_match(r, request.resource) for r in _as_list(statement["Resource"])):
            return False
    elif any(wildcard_match(r, request.resource) for r in _as_list(statement.get("NotResource"))):
        return False
    for operator, keys in (statement.get("Condition") or {}).items():
        for key, expected in keys.items():
            if not _condition_holds(operator, key, expected, request.context):
                return False
    return True


@dataclass
class RolePolicy:
    """Every identity-policy statement attached to one role, resolved."""

    role: str
    statements: list[dict[str, Any]]

    def decide(self, request: Request) -> str:
        """``Allow``, ``Deny`` (explicit) or ``ImplicitDeny``."""
        matching = [s for s in self.statements if statement_matches(s, request)]
        if any(s["Effect"] == "Deny" for s in matching):
            return "Deny"
        return "Allow" if any(s["Effect"] == "Allow" for s in matching) else "ImplicitDeny"

    def allows(self, action: str, resource: str = "*", **context: Any) -> bool:
        return self.decide(Request(action, resource, context)) == "Allow"

    def granted_actions(self) -> set[str]:
        """The action strings (possibly with wildcards) the role's Allow statements name."""
        return {a for s in self.statements if s["Effect"] == "Allow" for a in _as_list(s.get("Action"))}


def role_policy(template: dict[str, Any], role_logical_id: str) -> RolePolicy:
    """Inline ``Policies`` of the role plus every ``AWS::IAM::Policy`` that lists it in ``Roles``."""
    resources: dict[str, dict[str, Any]] = template["Resources"]
    role = resources[role_logical_id]
    if role["Properties"].get("ManagedPolicyArns"):
        raise AssertionError(f"{role_logical_id} has managed policies; this evaluator only reads inline statements")
    documents = [p["PolicyDocument"] for p in role["Properties"].get("Policies", [])]
    for resource in resources.values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if any(
            isinstance(r, dict) and r.get("Ref") == role_logical_id for r in resource["Properties"].get("Roles", [])
        ):
            documents.append(resource["Properties"]["PolicyDocument"])
    statements = [resolve(s, resources) for doc in documents for s in doc["Statement"]]
    return RolePolicy(role_logical_id, statements)


def arn_of(template: dict[str, Any], logical_id: str) -> str:
    return _arn_for(logical_id, template["Resources"][logical_id])
