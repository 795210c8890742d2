"""Benchmarks (tools.bench, tools.bench_moe: ratios side by side with their peers) and the architecture drawing
(tools.architecture). Nothing on the reading path imports this package."""
