"""``lakesync dev up|down|status``: the embedded stack on loopback."""

from __future__ import annotations

import argparse
import shutil

from rich.console import Console
from rich.table import Table

from lakesync_devkit.demo.database import create_demo_database, seed_demo_data
from lakesync_devkit.dev.production import ProductionStack
from lakesync_devkit.dev.stack import DevStack

HELP = """\
Start, stop or show the embedded stack: MariaDB (binlog on, ROW/FULL/FULL, GTIDs), the Kafka-protocol
broker and an Airflow home, on 127.0.0.1 with free ports. All state lives in one folder
(--state-dir, $LAKESYNC_STATE_DIR, default ./.lakesync). `source <state-dir>/env.sh` gives a shell the
stack's connections. Starting twice is harmless.

--shape production adds what a team runs: a Spark standalone cluster (a master, two workers), Airflow's
api-server, scheduler, dag-processor and triggerer on PostgreSQL with the LocalExecutor, and an S3 endpoint
(moto) holding the demo pipeline's Delta tables; see docs/deployment.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    dev = subparsers.add_parser("dev", help="the embedded development stack", description=HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    dev.add_argument("--state-dir", help="state folder (default: $LAKESYNC_STATE_DIR or ./.lakesync)")
    actions = dev.add_subparsers(title="actions", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start MariaDB and the broker; create the demo database")
    up.add_argument("--no-demo", action="store_true", help="do not create the demo bank database")
    up.add_argument("--shape", choices=["embedded", "production"], default="embedded",
                    help="embedded (default): MariaDB, broker, Airflow home on SQLite; production: also a Spark "
                         "cluster, Airflow services on PostgreSQL, Delta on an S3 endpoint")
    up.set_defaults(func=_up)
    down = actions.add_parser("down", help="stop the servers (data is kept unless --purge)")
    down.add_argument("--purge", action="store_true", help="also delete the state folder")
    down.set_defaults(func=_down)
    actions.add_parser("status", help="show what runs where").set_defaults(func=_status)
    lock = actions.add_parser("lock-jars", help="resolve the JVM jar sets' roots with Maven and rewrite "
                              "lakesync/jvm/jars.toml (after changing a version)")
    lock.add_argument("sets", nargs="*", metavar="SET", help="the sets to resolve (default: all)")
    lock.set_defaults(func=_lock_jars)


def _stack(args: argparse.Namespace, *, production: bool = False) -> DevStack:
    """The production shape's stack when asked for or when one was started in the folder, else the embedded one."""
    stack = ProductionStack(args.state_dir)
    return stack if production or stack.has_production() else DevStack(args.state_dir)


def _up(args: argparse.Namespace) -> int:
    production = args.shape == "production"
    stack = _stack(args, production=production)
    console = Console(stderr=True)
    what = "the production shape (this takes a minute or two)" if production else "MariaDB and the broker"
    with console.status(f"starting {what}..."):
        stack.up()
    if not args.no_demo:
        ensure_demo_database(stack)
        if isinstance(stack, ProductionStack):
            stack.start_relay()
    _print_status(stack)
    console.print(f"connections for your shell: [bold]source {stack.env_file}[/bold]")
    return 0


def ensure_demo_database(stack: DevStack) -> bool:
    """Create and seed the demo bank database unless it exists; True when it was created."""
    database = stack.settings.demo_database
    with stack.mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (database,))
        if cur.fetchone()[0]:
            return False
        create_demo_database(conn, database)
        seed_demo_data(conn, database)
    return True


def _down(args: argparse.Namespace) -> int:
    stack = _stack(args)
    stack.down()
    if args.purge and stack.state_dir.exists():
        shutil.rmtree(stack.state_dir)
        print(f"removed {stack.state_dir}")
    else:
        print("stopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    stack = _stack(args)
    if not stack.exists():
        print(f"no embedded stack in {stack.state_dir} (start one with `lakesync dev up`)")
        return 1
    _print_status(stack)
    return 0


def _lock_jars(args: argparse.Namespace) -> int:
    from lakesync_devkit.dev.jar_lock import lock_jars

    for name, jar_set in lock_jars(args.sets or None).items():
        print(f"{name}: {len(jar_set.jars)} jars, {jar_set.size / 1e6:.1f} MB")
    return 0


def _print_status(stack: DevStack) -> None:
    table = Table(title=f"lakesync embedded stack ({stack.state_dir})")
    for column in ("component", "state", "where", "log"):
        table.add_column(column)
    for name, info in stack.status().items():
        running = info.get("running")
        state = "" if running is None else ("[green]running[/green]" if running else "[red]stopped[/red]")
        where = str(info.get("address") or info.get("home") or info.get("root"))
        table.add_row(name, state, where, str(info.get("log", "")))
    Console().print(table)
