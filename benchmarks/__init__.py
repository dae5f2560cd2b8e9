"""Benchmark runs: real processes, figures printed and saved as JSON."""
