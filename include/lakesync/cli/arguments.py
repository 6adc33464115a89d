"""Command-line arguments every lakesync entry point shares (the CLI's commands and ``spark_apps/``)."""

from __future__ import annotations

import argparse


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pipeline NAME`` (required) and ``--pipelines-dir DIR``: which pipeline file to load."""
    parser.add_argument("--pipeline", required=True, metavar="NAME", help="pipeline name (include/pipelines/NAME.yaml)")
    parser.add_argument("--pipelines-dir", metavar="DIR",
                        help="folder of pipeline files (default: $LAKESYNC_PIPELINES_DIR or ./include/pipelines)")


def table_list(text: str) -> list[str] | None:
    """An argparse ``type`` for ``--tables a,b``: the names, blanks dropped; None (every table) when empty."""
    return [name.strip() for name in text.split(",") if name.strip()] or None
