"""Spans into DataFrames, the metrics computed from them, and the analytic cost model."""
