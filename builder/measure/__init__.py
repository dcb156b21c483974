"""Measure: streaming benchmark, quality gates and the evidence files they write."""
