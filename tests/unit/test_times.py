"""The one way a time read from AWS or an event becomes an aware UTC time."""

from __future__ import annotations

import datetime as dt

from governor.domain.times import as_utc, parse_time, utc

NAIVE = dt.datetime(2026, 12, 3, 12, 0)
UTC = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


def test_a_naive_time_is_taken_as_utc_and_an_aware_one_keeps_its_moment() -> None:
    assert utc(NAIVE) == UTC and utc(NAIVE).tzinfo is dt.UTC
    paris = dt.datetime(2026, 12, 3, 13, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert utc(paris) == UTC and utc(paris).utcoffset() == dt.timedelta(0)


def test_as_utc_reads_boto3_time_fields_and_nothing_else() -> None:
    assert as_utc(NAIVE) == UTC
    assert as_utc(None) is None and as_utc("2026-12-03T12:00:00Z") is None and as_utc(1764763200) is None
    assert parse_time("2026-12-03T12:00:00Z") == UTC  # text is parse_time's job
