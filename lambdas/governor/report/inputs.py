"""A report's inputs, saved with it (``inputs.json``) so the same report can be made again with the same money.

Issue 48: the demo printed ``governor report --logs ... --ledger ... --policy ... --out DIR`` as "the period and
figures above"; run, it read Cost Explorer again, had no credentials, fell back to list prices and said $1,181.26
where the demo had said $850.51. A report's money depends on more than its trail and ledger: the rates it priced
with (each effective rate looked up, found or not, Savings Plans / RI coverage, Price List API prices) and the
period and policy it ran with. :func:`recorded_inputs` takes them from the run's price book; a later run given the
file (``governor report --inputs FILE``) prices from :class:`RecordedRates` and :class:`RecordedPrices` instead of
reading AWS, so it gives the same figures, and says where its rates came from.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import Field

from governor.domain.costs import Coverage, EffectiveRate, PriceBook
from governor.domain.model import Model

FILE = "inputs.json"


class RecordedRate(Model):
    per_hour: float
    source: str


class RecordedCoverage(Model):
    savings_plans_pct: float | None = None
    reserved_hours_pct: float | None = None
    period: str = ""


class RunInputs(Model):
    """What one report run priced with, and the period and policy it ran with."""

    kind: str
    start: dt.datetime
    end: dt.datetime
    #: The policy as parsed (``Policy.model_dump(mode="json", by_alias=True)``).
    policy: dict[str, Any] = Field(default_factory=dict)
    #: How the effective-rate source names itself in a sentence (``Cost Explorer``), None without one.
    rates_label: str | None = None
    #: Every effective rate looked up (``type`` or ``type#instance``): its rate, or None when the source had none.
    rates: dict[str, RecordedRate | None] = Field(default_factory=dict)
    #: Why the effective-rate source could not be read, in words (``no AWS credentials``).
    rates_error: str | None = None
    rates_notes: list[str] = Field(default_factory=list)
    coverage: RecordedCoverage | None = None
    coverage_error: str | None = None
    #: Price List API prices looked up: type -> [USD per hour, GPUs] (None: not listed).
    price_list: dict[str, tuple[float, int | None] | None] = Field(default_factory=dict)


def recorded_inputs(
    book: PriceBook, kind: str, start: dt.datetime, end: dt.datetime, policy: dict[str, Any]
) -> RunInputs:
    """The inputs of a run that priced with ``book`` (read after the report is built: every lookup is in it)."""
    coverage = book.coverage_read
    return RunInputs(
        kind=kind,
        start=start,
        end=end,
        policy=policy,
        rates_label=book.effective_label if book.has_effective else None,
        rates={
            key: RecordedRate(per_hour=found.per_hour, source=found.source) if found is not None else None
            for key, found in sorted(book.looked_up.items())
        },
        rates_error=book.effective_error,
        rates_notes=book.effective_notes(),
        coverage=RecordedCoverage(**vars(coverage)) if coverage is not None else None,
        coverage_error=book.coverage_error,
        price_list=dict(sorted(book.listed_prices.items())),
    )


class Unavailable(Exception):
    """A source a recorded run could not read: re-raised in a rerun with the same words."""

    def __init__(self, words: str) -> None:
        super().__init__(words)
        self.words = words


class RecordedRates:
    """Implements ``domain.costs.EffectiveRates`` from a run's inputs: the same answer to every lookup the run made,
    the same failure when its source could not be read, and nothing for a lookup it never made."""

    def __init__(self, inputs: RunInputs) -> None:
        self._inputs = inputs
        self.LABEL = inputs.rates_label or "the effective-rate source"

    def rate(self, instance_type: str, instance_id: str | None = None) -> EffectiveRate | None:
        if self._inputs.rates_error is not None:
            raise Unavailable(self._inputs.rates_error)
        key = instance_type if instance_id is None else f"{instance_type}#{instance_id}"
        found = self._inputs.rates.get(key)
        return EffectiveRate(found.per_hour, found.source) if found is not None else None

    def coverage(self, is_gpu: Any) -> Coverage | None:
        if self._inputs.coverage_error is not None:
            raise Unavailable(self._inputs.coverage_error)
        found = self._inputs.coverage
        return Coverage(found.savings_plans_pct, found.reserved_hours_pct, found.period) if found else None

    def notes(self) -> list[str]:
        return list(self._inputs.rates_notes)


class RecordedPrices:
    """Implements ``domain.costs.OnDemandPrices`` from a run's inputs (the Price List API prices it read)."""

    def __init__(self, inputs: RunInputs) -> None:
        self._prices = inputs.price_list

    def on_demand(self, instance_type: str, region: str) -> tuple[float, int | None] | None:
        return self._prices.get(instance_type)


def replayed_book(inputs: RunInputs, policy: Any, region: str | None) -> PriceBook:
    """A price book that prices exactly as the recorded run did, without reading AWS."""
    effective = RecordedRates(inputs) if inputs.rates_label is not None else None
    return PriceBook(policy.pricing, region=region, price_list=RecordedPrices(inputs), effective=effective)


def replay_note(inputs: RunInputs, path: str) -> str:
    """What the rerun's report says about its prices."""
    source = f"{inputs.rates_label}'s rates" if inputs.rates_label else "the price table"
    return (
        f"priced with the inputs recorded by the report of {inputs.start:%Y-%m-%d %H:%M} to {inputs.end:%Y-%m-%d %H:%M}"
        f" UTC ({path}: {source} as read then, {len(inputs.rates)} lookups): the same money as that report"
    )
