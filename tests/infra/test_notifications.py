"""Notifier on the governor bus, scheduled reports into an encrypted bucket, and the fleet dashboard."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.conftest import Synth


def _function_id(synth: Synth, name: str) -> str:
    for logical_id, function in synth.resources("AWS::Lambda::Function").items():
        if function["Properties"]["Environment"]["Variables"].get("GOVERNOR_FUNCTION") == name:
            return logical_id
    raise AssertionError(f"no {name} function")


def _statements(synth: Synth, function: str) -> list[dict[str, Any]]:
    role = synth.resources("AWS::Lambda::Function")[function]["Properties"]["Role"]["Fn::GetAtt"][0]
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        if any(r.get("Ref") == role for r in policy["Properties"]["Roles"]):
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else actions


def test_notifier_receives_findings_from_the_governor_bus(synth: Synth) -> None:
    notifier = _function_id(synth, "notifier")
    rules = [
        rule
        for rule in synth.resources("AWS::Events::Rule").values()
        if rule["Properties"].get("EventPattern", {}).get("detail-type") == ["Governor Finding"]
        and rule["Properties"]["Targets"][0]["Arn"]["Fn::GetAtt"][0] == notifier
    ]
    assert len(rules) == 1  # (the Security Hub export subscribes to the same findings with its own rule)
    rule = rules[0]["Properties"]
    assert rule["EventPattern"]["source"] == ["gpu-fleet-governor"]
    assert "EventBusName" in rule  # the governor bus, not the default one
    target = rule["Targets"][0]
    assert target["Arn"]["Fn::GetAtt"][0] == notifier
    assert "DeadLetterConfig" in target and target["RetryPolicy"]["MaximumRetryAttempts"] == 4


def test_notifier_reads_only_the_webhook_secret_and_sends_no_email_without_a_sender(synth: Synth) -> None:
    statements = _statements(synth, _function_id(synth, "notifier"))
    secret = [s for s in statements if "secretsmanager:GetSecretValue" in _actions(s)]
    assert len(secret) == 1
    assert "governor/slack-webhook-??????" in json.dumps(secret[0]["Resource"])
    assert not any("ses:SendEmail" in _actions(s) for s in statements)  # email_sender is null by default


def test_reports_run_daily_and_weekly_on_scheduler(synth: Synth) -> None:
    report = _function_id(synth, "report")
    schedules = synth.resources("AWS::Scheduler::Schedule")
    mine = {
        s["Properties"]["ScheduleExpression"]: json.dumps(s["Properties"]["Target"]["Input"])
        for s in schedules.values()
        if s["Properties"]["Target"]["Arn"]["Fn::GetAtt"][0] == report
    }
    assert set(mine) == {"cron(0 7 * * ? *)", "cron(0 7 ? * MON *)"}
    assert '\\"detail\\":{\\"kind\\":\\"daily\\"}' in mine["cron(0 7 * * ? *)"]
    assert '\\"detail\\":{\\"kind\\":\\"weekly\\"}' in mine["cron(0 7 ? * MON *)"]


def test_the_notifier_posts_each_channels_digest_on_its_own_schedule(synth: Synth) -> None:
    """Issue 48: what the notifier holds back (notifications.immediate) goes out every digest_hours (8, shipped), on
    the hour from midnight UTC; an undeliverable tick goes to the notifier's DLQ."""
    notifier = _function_id(synth, "notifier")
    mine = [
        s["Properties"]
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Arn"]["Fn::GetAtt"][0] == notifier
    ]
    assert [s["ScheduleExpression"] for s in mine] == ["cron(0 0/8 * * ? *)"]
    assert '\\"detail\\":{\\"kind\\":\\"digest\\"}' in json.dumps(mine[0]["Target"]["Input"])
    assert "DeadLetterConfig" in mine[0]["Target"]


def test_reports_bucket_is_kms_encrypted_tls_only_and_logged(synth: Synth) -> None:
    report = synth.resources("AWS::Lambda::Function")[_function_id(synth, "report")]
    bucket_ref = report["Properties"]["Environment"]["Variables"]["REPORTS_BUCKET"]["Ref"]
    bucket = synth.resources("AWS::S3::Bucket")[bucket_ref]["Properties"]
    encryption = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert encryption["SSEAlgorithm"] == "aws:kms" and "KMSMasterKeyID" in encryption
    assert bucket["PublicAccessBlockConfiguration"]["BlockPublicPolicy"] is True
    assert "DestinationBucketName" in bucket["LoggingConfiguration"]
    policies = [
        p
        for p in synth.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"].get("Ref") == bucket_ref
    ]
    denies = [
        s
        for p in policies
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny" and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
    ]
    assert denies


def test_report_role_writes_reports_renders_charts_and_queries_athena(synth: Synth) -> None:
    statements = _statements(synth, _function_id(synth, "report"))
    actions = {a for s in statements for a in _actions(s)}
    assert {"s3:PutObject", "cloudwatch:GetMetricWidgetImage", "athena:StartQueryExecution"} <= actions
    put = next(s for s in statements if _actions(s) == ["s3:GetObject", "s3:PutObject"])  # trend, signed link
    assert json.dumps(put["Resource"]).endswith('/reports/*"]]}')
    chart = next(s for s in statements if "cloudwatch:GetMetricWidgetImage" in _actions(s))
    assert _actions(chart) == ["cloudwatch:GetMetricWidgetImage"]


def test_dashboard_shows_gpu_health_verdicts_errors_and_dlq_depth(synth: Synth) -> None:
    dashboards = synth.resources("AWS::CloudWatch::Dashboard")
    assert len(dashboards) == 1
    body = json.dumps(next(iter(dashboards.values()))["Properties"]["DashboardBody"])
    for needle in (
        "nvidia_smi_utilization_gpu",
        "nvidia_smi_memory_used",
        "nvidia_smi_temperature_gpu",
        "IdleActions",
        "Spot",
        'MetricName=\\\\\\"Errors\\\\\\"',
        "ApproximateNumberOfMessagesVisible",
    ):
        assert needle in body, needle
    report = synth.resources("AWS::Lambda::Function")[_function_id(synth, "report")]
    assert "#dashboards:name=" in json.dumps(report["Properties"]["Environment"]["Variables"]["DASHBOARD_URL"])


def test_every_count_of_something_not_done_has_an_alarm_a_widget_and_a_runbook_line(synth: Synth) -> None:
    """Issue 35: failed acts, unsent findings and unpublished warnings were counted and nobody was told."""
    from tests.conftest import ROOT

    alarms = [a["Properties"] for a in synth.resources("AWS::CloudWatch::Alarm").values()]
    body = json.dumps(next(iter(synth.resources("AWS::CloudWatch::Dashboard").values()))["Properties"])
    runbook = (ROOT / "docs" / "reliability.md").read_text()
    for metric in ("IdleActionFailures", "FindingsUnsent", "IdleWarningsUnpublished"):
        found = [a for a in alarms if a.get("MetricName") == metric]
        assert len(found) == 1 and found[0]["AlarmActions"], metric
        assert metric in body and f"`{metric}`" in runbook, metric
    # A parked Spot event is a missed deadline: counted when it is parked, so a replay that empties the queue does
    # not clear the alarm before anyone looked.
    parked = [a for a in alarms if a.get("MetricName") == "NumberOfMessagesSent"]
    assert len(parked) == 1 and "spot" in parked[0]["AlarmDescription"] and parked[0]["AlarmActions"]
    assert "NumberOfMessagesSent" in body and "`TimeBoundParked`" in runbook
