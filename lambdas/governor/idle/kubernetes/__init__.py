"""GPU nodes of Kubernetes clusters (EKS with managed node groups or Karpenter): their GPU metrics from NVIDIA's DCGM
exporter through Prometheus (Amazon Managed Service for Prometheus or any Prometheus-compatible endpoint) or from
Container Insights, with the pods that held each GPU. ``promql`` is pure (the queries, written once, and the reading
of their answers, also used by ``governor backtest``); ``prometheus`` and ``container_insights`` are adapters.
Imports nothing, so the sweep of a fleet without clusters never loads them."""
