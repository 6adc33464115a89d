"""Benchmarks run by ``lakesync bench``: each measures lakesync against a baseline in the same run."""
