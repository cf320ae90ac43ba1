"""Powertools Logger and Metrics for every function, and X-Ray SDK tracing only where it is switched on.

Tracing is off by default because it was measured not to pay for itself here: Powertools' ``Tracer`` imports the
X-Ray SDK and patches botocore at import, which cost more CPU on a cold start than importing boto3, Powertools and
pydantic together (``python -m bench.cold_start``, bench/README.md section 2). Lambda's active tracing (set by the
stack) still records every invocation's init and duration segments without it. ``GOVERNOR_TRACING=true`` (or
Powertools' own ``POWERTOOLS_TRACE_DISABLED=false``) turns SDK subsegments on for a function that needs them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics

SERVICE = "gpu-fleet-governor"
NAMESPACE = "GpuFleetGovernor"
TRACING_ENV = "GOVERNOR_TRACING"
_TRUE = frozenset({"1", "true", "yes", "on"})

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

F = TypeVar("F", bound=Callable[..., Any])


def tracing_enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether this function traces with the X-Ray SDK: ``GOVERNOR_TRACING``, else Powertools' own switch."""
    env = os.environ if environ is None else environ
    chosen = env.get(TRACING_ENV)
    if chosen is not None:
        return chosen.strip().lower() in _TRUE
    disabled = env.get("POWERTOOLS_TRACE_DISABLED")
    return disabled is not None and disabled.strip().lower() in {"0", "false", "no", "off"}


class LazyTracer:
    """Powertools ``Tracer`` built only when tracing is on; otherwise its decorator returns the handler untouched."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._tracer: Any = None

    @property
    def active(self) -> bool:
        """Whether the real tracer was built (the X-Ray SDK imported and botocore patched)."""
        return self._tracer is not None

    def _real(self) -> Any:
        if self._tracer is None:
            from aws_lambda_powertools import Tracer

            self._tracer = Tracer(service=self._service)
        return self._tracer

    def capture_lambda_handler(self, handler: F) -> F:
        """Trace the handler when tracing is on (decided once, when the handler module is imported)."""
        if not tracing_enabled():
            return handler
        traced: F = self._real().capture_lambda_handler(handler)
        return traced


tracer = LazyTracer(SERVICE)
