"""Benchmarks and the chaos soak: throughput, peers, chaos, operator scale (see bench/README.md)."""
