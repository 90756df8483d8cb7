"""Shared code of the data preparation: what more than one benchmark's folder needs. It imports no benchmark
folder (tests/test_layering.py)."""
