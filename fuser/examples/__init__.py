"""Real fusions used by the demo, the tests and the benchmarks."""
