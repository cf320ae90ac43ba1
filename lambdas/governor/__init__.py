"""GPU Fleet Governor runtime: handlers, pure domain decisions, and the adapters that talk to AWS."""

__version__ = "0.1.0"
