"""The one place cdk-nag is wired, and where every acknowledged finding is written with its reason.

cdk-nag 3.x runs as CDK policy-validation plugins: with an unacknowledged finding, synthesis fails. Two packs run on
every synth: AWS Solutions and NIST 800-53 rev 5. Construct-specific AWS Solutions acknowledgements sit beside the
resource they concern (through :func:`acknowledge`); the NIST rules this design answers differently are below.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Stack, Token, Validations
from cdk_nag import AwsSolutionsChecks, NIST80053R5Checks
from constructs import IConstruct

NIST = "NIST.800.53.R5"

#: NIST 800-53 rev 5 rules the whole stack answers by design, each with the reason it is safe here.
NIST_BY_DESIGN: dict[str, str] = {
    "LambdaInsideVPC": (
        "The functions call only AWS service APIs over TLS and reach no VPC resource; running them in a VPC would "
        "need a NAT gateway or about fourteen interface endpoints per zone (EC2, SSM, KMS, IAM, STS, CloudWatch, "
        "Logs, DynamoDB, SQS, EventBridge, Secrets Manager, S3, Athena, SES) and add no control on the data path."
    ),
    "LambdaDLQ": (
        "Every function's failed asynchronous invocations go to its own KMS-encrypted, TLS-only SQS queue through the "
        "Lambda on-failure destination (with the error and request context); a DeadLetterConfig on the same queue "
        "would deliver each failure twice."
    ),
    "LambdaConcurrency": (
        "Reserved concurrency is opt-in for the spot and interactions functions only (spot.reserved_concurrency, "
        "interactions.reserved_concurrency, see docs/deploy.md): CloudFormation fails the deploy unless the account "
        "keeps 100 unreserved executions, and new accounts may have a quota of 10. The others run on schedules or "
        "low-rate CloudTrail events."
    ),
    "IAMNoInlinePolicy": (
        "Each role's policy is generated from the AWS actions its code declares and scoped to this stack's resources "
        "(tests/infra/test_least_privilege.py proves the match); a customer-managed policy would add an attachable "
        "artefact that outlives the one role it was written for."
    ),
    "DynamoDBInBackupPlan": (
        "The ledger has point-in-time recovery (35 days, continuous) and deletion protection; the idempotency table "
        "holds 24-hour records that have no value after their TTL."
    ),
    "CloudTrailCloudWatchLogsEnabled": (
        "Management events already reach EventBridge (the enforcers) and S3 (the Athena audit lake with log-file "
        "validation); a CloudWatch Logs copy of every event would add ingestion cost and no control."
    ),
    "S3BucketReplicationEnabled": (
        "The stack is regional by design and its trail is multi-region into one KMS-encrypted bucket; cross-region "
        "replication of trail, report, checkpoint and log buckets is left to the organisation's backup account."
    ),
}

#: Buckets whose objects are written once and can be re-created: versioning would only keep deleted copies.
#: (Every server-access-log bucket is acknowledged where it is made: ``access_log_bucket`` below.)
UNVERSIONED_BUCKETS: dict[str, str] = {
    "Audit/Results": "Athena query results are re-created by re-running the query and expire by lifecycle.",
}


def enable(app: App) -> None:
    Validations.of(app).add_plugins(AwsSolutionsChecks(app), NIST80053R5Checks(app))


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge ``rule`` on ``scope`` and its children; the reason must say why it is safe here."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))


IAM5 = "AwsSolutions::AwsSolutions-IAM5"


def nag_name(scope: IConstruct, resource: str) -> str:
    """How cdk-nag names ``resource`` in a finding id, in this stack's environment.

    ``Ref`` reads ``<Name>`` (``<AWS::Region>`` when the stack is environment-agnostic), ``Fn::GetAtt`` reads
    ``<LogicalId.Attr>``, and a concrete account or region (``-c account=... -c region=...``) reads as itself. Naming
    an acknowledgement from the very expression the grant uses keeps it valid in every environment; a hand-written
    ``<AWS::Region>`` stops matching as soon as the region is known.
    """
    resolved = Stack.of(scope).resolve(resource)

    def render(part: object) -> str:
        if isinstance(part, str):
            return part
        if isinstance(part, dict) and "Ref" in part:
            return f"<{part['Ref']}>"
        if isinstance(part, dict) and "Fn::GetAtt" in part:
            return "<" + ".".join(part["Fn::GetAtt"]) + ">"
        if isinstance(part, dict) and "Fn::Join" in part:
            separator, parts = part["Fn::Join"]
            return str(separator).join(render(p) for p in parts)
        raise ValueError(f"cannot name {part!r} as cdk-nag does")

    return render(resolved)


def arn(scope: IConstruct, template: str) -> str:
    """``template`` with ``{partition}``, ``{region}`` and ``{account}`` filled from the stack (tokens or literals)."""
    stack = Stack.of(scope)
    return template.format(partition=stack.partition, region=stack.region, account=stack.account)


def acknowledge_wildcard(scope: IConstruct, resource: str, reason: str) -> None:
    """Acknowledge AwsSolutions-IAM5 for the wildcard ``resource`` (the grant's own expression) on ``scope``."""
    if not Token.is_unresolved(resource) and "*" not in resource:
        raise ValueError(f"{resource} has no wildcard to acknowledge")
    acknowledge(scope, f"{IAM5}[Resource::{nag_name(scope, resource)}]", reason)


def acknowledge_access_log_bucket(bucket: IConstruct) -> None:
    """A server-access-log bucket, wherever a construct makes one (audit, checkpoints, reports in any region)."""
    acknowledge(
        bucket,
        f"{NIST}::{NIST}-S3BucketVersioningEnabled",
        "S3 server access logs are written once and never overwritten.",
    )
    acknowledge(
        bucket,
        f"{NIST}::{NIST}-S3DefaultEncryptionKMS",
        "S3 server access logging delivers only to buckets with SSE-S3 default encryption; SSE-KMS targets "
        "are not supported, so this log bucket uses SSE-S3.",
    )


def _find(stack: Stack, path: str) -> IConstruct | None:
    node: IConstruct | None = stack
    for part in path.split("/"):
        node = node.node.try_find_child(part) if node is not None else None
    return node


def acknowledge_nist(stack: Stack) -> None:
    """The NIST 800-53 rev 5 findings this design answers differently, each with its reason."""
    for rule, reason in NIST_BY_DESIGN.items():
        acknowledge(stack, f"{NIST}::{NIST}-{rule}", reason)
    for path, reason in UNVERSIONED_BUCKETS.items():
        bucket = _find(stack, path)
        if bucket is not None:
            acknowledge(bucket, f"{NIST}::{NIST}-S3BucketVersioningEnabled", reason)


#: checkov (run by tests/infra/test_checkov.py from its own venv) findings this design answers differently:
#: check id -> (the logical-id prefixes it may fail on, or "*" for every resource of its type; the reason).
CHECKOV_ACKNOWLEDGED: dict[str, tuple[tuple[str, ...] | str, str]] = {
    "CKV_AWS_115": ("*", NIST_BY_DESIGN["LambdaConcurrency"]),
    "CKV_AWS_116": ("*", NIST_BY_DESIGN["LambdaDLQ"]),
    "CKV_AWS_117": ("*", NIST_BY_DESIGN["LambdaInsideVPC"]),
    "CKV_AWS_18": (
        ("AuditAccessLogs", "SpotCheckpointsAccessLogs", "NotificationsReportsAccessLogs"),
        "These buckets are the server access log targets; logging them would need yet another bucket and log "
        "deliveries about log deliveries.",
    ),
    "CKV_AWS_21": (
        ("AuditAccessLogs", "AuditResults", "SpotCheckpointsAccessLogs", "NotificationsReportsAccessLogs"),
        "S3 access logs are written once and never overwritten; Athena results are re-created by re-running the "
        "query and expire by lifecycle (as UNVERSIONED_BUCKETS says for cdk-nag).",
    ),
    "CKV_AWS_27": (
        ("ForwardingDlq",),
        "The organisation spoke's forwarding DLQ (member accounts) is encrypted at rest with SQS-managed keys "
        "(SqsManagedSseEnabled); checkov's check wants a KMS key id. The spoke has no project key (one customer key "
        "per member account and region, with a key policy EventBridge can use, for undelivered copies of events the "
        "hub already receives), and an EventBridge dead-letter target cannot use the AWS-managed aws/sqs key.",
    ),
    "CKV_AWS_258": (
        ("InteractionsFunctionFunctionUrl",),
        "Slack's interactivity Request URL must be reachable from Slack, which cannot sign requests with IAM (SigV4); "
        "the function refuses every request whose Slack v0 signature (signing secret in Secrets Manager) is wrong or "
        "older than five minutes before reading anything else (docs/slack.md; tests/adapters/test_interactions.py).",
    ),
}


#: cfn-lint errors (tests/infra/test_deploy_environments.py lints every documented synth) this design answers
#: differently: rule id -> (the logical-id prefixes it may fail on, the reason).
CFN_LINT_ACKNOWLEDGED: dict[str, tuple[tuple[str, ...], str]] = {
    "E3032": (
        ("OrganizationSpokes",),
        "The environment-agnostic organisation hub lists each region of organization.regions in its hub-account "
        "instance group as Fn::If(HubRegionIs<region>, AWS::NoValue, region); cfn-lint weighs every combination of "
        "those conditions, all true at once included, and sees an empty Regions list. Each condition compares "
        "AWS::Region with a different region, so at most one holds and the group keeps at least one of the two or "
        "more regions; with a single region there is no such group (infra/constructs/hub_regions.py).",
    ),
}
