"""Tests for tally, run with ``python -m unittest discover -s tests -t .``."""
