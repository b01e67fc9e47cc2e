"""Figures of measured windows: per-cell metrics of one window (`window`), their declaration (`specs`),
one-second slices (`timeslices`), goodput under SLOs (`slo`) and statistics over repeats (`stats`)."""
