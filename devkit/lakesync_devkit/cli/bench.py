"""``lakesync bench snapshot|relay|stream``: benchmarks that measure lakesync against its baselines in one run."""

from __future__ import annotations

import argparse
import importlib

BENCH_MODULES = ("lakesync_devkit.bench.snapshot", "lakesync_devkit.bench.relay", "lakesync_devkit.bench.stream")


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench", help="benchmarks (figures and ratio to a baseline measured in the same run)",
        description="Each benchmark builds its data on an embedded stack, measures a baseline and lakesync in the "
                    "same run, and prints rows/s and the ratio (--json for one JSON object).",
    )
    benches = bench.add_subparsers(title="benchmarks", metavar="BENCH", required=True)
    for module_name in BENCH_MODULES:
        importlib.import_module(module_name).register(benches)
