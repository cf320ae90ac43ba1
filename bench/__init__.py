"""Benchmarks that print figures; never part of the pass/fail test run."""
