"""Simulations of a GPU fleet for tests, ``governor backtest`` examples, the demo and the benchmarks."""
