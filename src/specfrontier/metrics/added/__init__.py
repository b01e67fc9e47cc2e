"""Metrics declared in files of their own: each module sets `METRIC = MetricSpec(...)`, or `METRICS = (...)`
for metrics shown together (`metrics.declare`), and its docstring is the metric's full definition.

`metrics.specs` collects every module here, by file name, after the core declarations: adding a metric is
one file here and its test, tests/unit/metrics/added/test_<file>.py (docs/metrics.md, "Adding a metric").
"""
