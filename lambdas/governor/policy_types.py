"""The value types policy sections share (``governor.policy`` and the sections capabilities declare in their packages,
``governor.<name>.policy``). Imports only the shared domain, so a capability's section never imports the composed
``Policy`` (which imports the capabilities' sections)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from governor.domain.model import Model

MAX_DAYS = 3650  # ten years: retention, ages and lifecycle periods
_SCHEDULE = re.compile(
    r"^(rate\(\s*[1-9][0-9]{0,5}\s+(minute|minutes|hour|hours|day|days)\s*\)"
    r"|cron\(\s*\S+(\s+\S+){5}\s*\)"
    r"|at\(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\))$"
)


def _schedule_expression(value: str) -> str:
    """EventBridge Scheduler's three forms; anything else would only fail at deploy time."""
    if not _SCHEDULE.match(value):
        raise ValueError(f"{value!r} is not a schedule: use rate(N minutes|hours|days), cron(6 fields) or at(...)")
    return value


Schedule = Annotated[str, AfterValidator(_schedule_expression)]
TagKey = Annotated[str, Field(min_length=1, max_length=128)]


class Section(Model):
    """A policy section: unknown fields are errors (with "did you mean"), values frozen, no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    #: Keys that left this section for another top-level one (key -> that section). For one release the policy still
    #: reads them here, at their new place, with a warning naming it (``governor.policy``); set at both, they are an
    #: error here.
    moved_keys: ClassVar[Mapping[str, str]] = {}


class PortRange(Section):
    """An inclusive TCP/UDP port range; written in YAML as ``22``, ``"2222-2223"`` or ``{from: 1, to: 2}``."""

    from_port: int = Field(alias="from", ge=0, le=65535)
    to_port: int = Field(alias="to", ge=0, le=65535)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _parse_short_forms(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("a port range is a number, 'FROM-TO' or {from, to}")
        if isinstance(value, int):
            return {"from": value, "to": value}
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
            if not match:
                raise ValueError(f"'{value}' is not a port or a 'FROM-TO' range")
            low = int(match.group(1))
            return {"from": low, "to": int(match.group(2) or low)}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.from_port > self.to_port:
            raise ValueError(f"range starts at {self.from_port}, after its end {self.to_port}")
        return self

    def overlaps(self, low: int, high: int) -> bool:
        return self.from_port <= high and low <= self.to_port

    def covers(self, low: int, high: int) -> bool:
        return self.from_port <= low and high <= self.to_port


class Exemptions(Section):
    """Resources a policy reports on but never changes: by id, or by tag (``key: value``, ``"*"`` for any value)."""

    ids: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)

    def matches(self, resource_id: str, tags: dict[str, str]) -> bool:
        if resource_id in self.ids:
            return True
        return any(k in tags and (v == "*" or tags[k] == v) for k, v in self.tags.items())
