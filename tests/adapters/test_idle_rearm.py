"""``governor idle status|rearm``: an operator re-arms the circuit breaker in the ledger table the sweep reads."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, Breaker
from governor.idle.gather import load_breaker
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.main import main
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink

TABLE = "governor-ledger"
TRIPPED = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        create_ledger_table(TABLE)
        yield DynamoLedger(TABLE, region="us-east-1")


def test_status_then_rearm_releases_the_held_instances_for_the_next_sweep(
    ledger: DynamoLedger, capsys: pytest.CaptureFixture[str]
) -> None:
    held = Breaker(tripped_at=TRIPPED, anomaly_start=TRIPPED, held=frozenset({"i-0a", "i-0b"}))
    ledger.put_item(BREAKER_KIND, BREAKER_KEY, held.to_item())
    assert main(["idle", "status", "--table", TABLE, "--region", "us-east-1"]) == 0
    assert "open since 2026-11-02T09:00:00+00:00" in capsys.readouterr().out
    assert main(["idle", "rearm", "--table", TABLE, "--region", "us-east-1"]) == 0
    assert "released 2 instances (i-0a, i-0b)" in capsys.readouterr().out
    runtime = Runtime(parse_policy({}), ledger, MemorySink(), MemoryDeadLetters(), "us-east-1")
    after = load_breaker(runtime)  # exactly what the next sweep reads
    assert not after.open and after.released == frozenset({"i-0a", "i-0b"})
    assert main(["idle", "rearm", "--table", TABLE, "--region", "us-east-1"]) == 0
    assert "was not open" in capsys.readouterr().out


def test_missing_action_or_table_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["idle"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "idle status|rearm" in err and "Traceback" not in err
    with mock_aws():
        assert main(["idle", "rearm", "--table", "no-such-table", "--region", "us-east-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-table" in err


def test_organisation_target_breaker_is_named_by_account_and_region(
    ledger: DynamoLedger, capsys: pytest.CaptureFixture[str]
) -> None:
    from governor.fanout import breaker_key

    key = breaker_key("222222222222", "eu-west-1")
    held = Breaker(tripped_at=TRIPPED, anomaly_start=TRIPPED, held=frozenset({"i-0c"}))
    ledger.put_item(BREAKER_KIND, key, held.to_item())
    target = ["--table", TABLE, "--region", "us-east-1", "--target", "222222222222/eu-west-1"]
    assert main(["idle", "status", *target]) == 0
    assert "holding 1: i-0c" in capsys.readouterr().out
    assert main(["idle", "rearm", *target]) == 0
    assert "released 1 instances (i-0c)" in capsys.readouterr().out
    assert not Breaker.from_item(ledger.get_item(BREAKER_KIND, key)).open
    assert ledger.get_item(BREAKER_KIND, BREAKER_KEY) is None  # the hub's own breaker untouched


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--target", "222222222222"], "--target '222222222222': expected ACCOUNT/REGION"),
        (["--target", "2222/eu-west-1"], "--target '2222/eu-west-1'"),
        (["--target", "222222222222/Europe"], "--target '222222222222/Europe'"),
        (["--region", "x"], "--region 'x'"),
    ],
)
def test_bad_target_flags_exit_2_with_one_line(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["idle", "status", "--table", TABLE, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err
