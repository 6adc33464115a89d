"""``lakesync``: the command line.

Each subcommand lives in its own module under :mod:`lakesync.cli` and registers itself with
``register(subparsers)``. Other packages add commands through the ``lakesync.commands`` entry points: the dev
kit (``lakesync-devkit``) adds ``dev``, ``demo`` and ``bench`` that way, so a production install has none of them. This module only dispatches, and turns a :class:`LakesyncError`
into a clear message and an exit code instead of a traceback (``--debug`` shows the chain).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from lakesync import __version__
from lakesync.core.errors import LakesyncError

#: The product's command modules, in the order ``--help`` lists them (plugged-in commands come after).
COMMAND_MODULES = (
    "lakesync.cli.snapshot",
    "lakesync.cli.relay",
    "lakesync.cli.stream",
    "lakesync.cli.status",
    "lakesync.cli.validate",
    "lakesync.cli.settle",
    "lakesync.cli.recover",
    "lakesync.cli.enable_deletion_vectors",
    "lakesync.cli.jars",
)

#: The entry-point group other packages register commands in (name = command, value = module).
COMMAND_ENTRY_POINTS = "lakesync.commands"


def all_command_modules() -> tuple[str, ...]:
    """The product's command modules, then those of installed packages that plug commands in."""
    plugged = tuple(entry.value for entry in entry_points(group=COMMAND_ENTRY_POINTS))
    return COMMAND_MODULES + tuple(module for module in plugged if module not in COMMAND_MODULES)

DESCRIPTION = """\
Keep Delta Lake tables in step with MySQL and MariaDB.

Typical flow: `lakesync dev up` (embedded stack), `lakesync snapshot --pipeline demo` (full load),
`lakesync relay --pipeline demo` (binlog -> Kafka), `lakesync stream --pipeline demo` (Kafka -> Delta),
`lakesync status --pipeline demo`. In production, Airflow runs the same steps (see README).
"""


def _command_modules(argv: Sequence[str]) -> tuple[str, ...]:
    """The modules to register: only the named command's (each module is named after its command, with ``_``
    for ``-``), so that ``lakesync relay ...`` does not import what ``lakesync validate`` needs; all of them for
    the top-level help or an unknown command (argparse then lists them)."""
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    modules = all_command_modules()
    chosen = tuple(m for m in modules if named and m.rsplit(".", 1)[1] == named.replace("-", "_"))
    return chosen or modules


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakesync", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"lakesync {__version__}")
    parser.add_argument("--debug", action="store_true", help="log verbosely and show tracebacks on errors")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module_name in _command_modules(argv):
        importlib.import_module(module_name).register(subparsers)
    return parser


def configure_logging(debug: bool) -> None:
    level = logging.DEBUG if debug else getattr(logging, os.environ.get("LAKESYNC_LOG_LEVEL", "INFO").upper(), 20)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "pymysqlreplication", "urllib3"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    configure_logging(args.debug)
    try:
        return int(args.func(args) or 0)
    except LakesyncError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
