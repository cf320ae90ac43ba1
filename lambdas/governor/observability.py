"""Powertools Logger, Metrics and Tracer, configured once for every function."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "gpu-fleet-governor"
NAMESPACE = "GpuFleetGovernor"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)
