"""Reliability tooling shared by the test suite and ``bench/soak.py``: fault injection and API-call recording.

Nothing here runs in a deployed function; it lives in the package so benchmarks and tests use one implementation.
"""
