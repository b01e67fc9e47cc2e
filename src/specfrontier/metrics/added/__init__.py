"""Metrics declared in a file of their own: each module sets `METRIC = MetricSpec(...)` (`metrics.declare`).

`metrics.specs` collects every module here, by file name, after the core declarations: adding a metric is
one file here, its test, and its line in docs/metrics.md (docs/metrics.md, "Adding a metric").
"""
