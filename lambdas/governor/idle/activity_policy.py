"""``idle.activity_signals``: metrics the team defines that mark a machine busy while they read above a threshold
(an open notebook kernel, a training loop's step counter, a queue's depth). Declared here, read by
:mod:`governor.idle.activity_source`, judged by :mod:`governor.idle.activity`.

A signal can only keep a machine, never make one idle, and each is tied to the instance it judges: one of its
dimensions must be ``{instance_id}``, which the sweep replaces with the instance's id. A signal without it would be
one series any account user allowed ``cloudwatch:PutMetricData`` could publish to spare every machine forever
(docs/security.md boundary 17); with it, a published value spares only the instance it names, and every keep is
recorded with the signal, its value and its threshold.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from governor.policy_types import Section

#: The placeholder a signal's dimension carries for the instance it judges.
INSTANCE_PLACEHOLDER = "{instance_id}"


class ActivitySignal(Section):
    """One metric per instance: busy while a sample in the window reads above ``threshold``. Either a CloudWatch
    metric (``namespace``, ``metric``, ``dimensions``) or a PromQL query read from the Prometheus of ``cluster`` (one
    of ``idle.clusters``), its series mapped to a node of that cluster, or its instance, by the label ``label``."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    namespace: str | None = Field(None, min_length=1, max_length=255, pattern=r"^[^:].*$")
    metric: str | None = Field(None, min_length=1, max_length=255)
    # At least one value must be exactly {instance_id}; the others are matched as written.
    dimensions: dict[str, str] = Field(default_factory=dict, max_length=30)
    statistic: Literal["Maximum", "Average", "Sum", "Minimum", "SampleCount"] = "Maximum"
    # PromQL: a query whose series carry ``label`` naming the node (or the instance id); read as max by (label).
    promql: str | None = Field(None, min_length=1, max_length=1000)
    cluster: str | None = Field(None, min_length=1, max_length=100)
    label: str = Field("node", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    threshold: float
    # How often the team publishes it: fewer than idle.min_samples_fraction of window / period samples is unknown.
    period_seconds: int = Field(60, ge=60, le=3600, multiple_of=60)

    @model_validator(mode="after")
    def _names_the_instance(self) -> ActivitySignal:
        if self.promql is not None:
            if self.cluster is None or self.namespace or self.metric or self.dimensions:
                raise ValueError("a PromQL signal names its cluster (idle.clusters) and no CloudWatch metric")
            return self
        if not self.namespace or not self.metric or self.cluster is not None:
            raise ValueError("a signal is a CloudWatch metric (namespace, metric, dimensions) or promql with cluster")
        if INSTANCE_PLACEHOLDER not in self.dimensions.values():
            raise ValueError(
                f"dimensions: one value must be {INSTANCE_PLACEHOLDER} (a signal judges the instance it names; a "
                "signal naming no instance would spare every machine whoever can publish it)"
            )
        for key, value in self.dimensions.items():
            if not key or len(key) > 255 or (value != INSTANCE_PLACEHOLDER and "{" in value):
                raise ValueError(f"dimensions: {key!r}={value!r}: only {INSTANCE_PLACEHOLDER} may be a placeholder")
        return self

    @property
    def query(self) -> str:
        """The PromQL read: one series per node (or instance) the label names."""
        return f"max by ({self.label}) ({self.promql})"

    def dimensions_for(self, instance_id: str) -> list[dict[str, str]]:
        """The metric's dimensions for one instance, as GetMetricData takes them."""
        return [
            {"Name": key, "Value": instance_id if value == INSTANCE_PLACEHOLDER else value}
            for key, value in sorted(self.dimensions.items())
        ]

    def __hash__(self) -> int:  # frozen, but dimensions is a dict: the adapters are cached per policy (per_session)
        dimensions = tuple(sorted(self.dimensions.items()))
        return hash((self.name, self.namespace, self.metric, dimensions, self.statistic, self.promql, self.cluster))
