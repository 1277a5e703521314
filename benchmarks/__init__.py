"""Benchmark scripts (run as files: ``python benchmarks/bench_sim.py``); figures in docs/BENCHMARKS.md."""
