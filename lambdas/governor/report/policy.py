"""The ``reports`` section of governor.yaml, declared here (the registry entry names it;
``governor.policy`` adds it to ``Policy``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from governor.policy_types import Schedule, Section


class ReportsPolicy(Section):
    """Scheduled security and cost reports; ``enforce: false`` renders and archives them without sending."""

    enforce: bool = True
    daily_schedule: Schedule = "cron(0 7 * * ? *)"
    weekly_schedule: Schedule = "cron(0 7 ? * MON *)"
    top_rows: int = Field(10, ge=1, le=100)
    rightsizing_max_utilization: float = Field(30.0, gt=0, le=100)
    email_recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)
