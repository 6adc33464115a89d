"""``lakesync dev up|down|status``: the embedded stack on loopback."""

from __future__ import annotations

import argparse
import shutil

from rich.console import Console
from rich.table import Table

from lakesync.core.errors import StackError
from lakesync_devkit.demo.database import create_demo_database, seed_demo_data
from lakesync_devkit.dev.debezium import (
    DEFAULT_CONNECTOR_NAME,
    DEFAULT_SERVER_ID,
    DEFAULT_TOPIC_PREFIX,
    HEAP,
    SNAPSHOT_MODES,
    ConnectorSettings,
)
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

`lakesync dev debezium up|down|status` runs Debezium's MariaDB connector in Kafka Connect standalone beside
the stack (docs/debezium.md); `lakesync dev down` stops it too.
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
    _register_debezium(actions)
    lock = actions.add_parser("lock-jars", help="resolve the JVM jar sets' roots with Maven and rewrite "
                              "lakesync/jvm/jars.toml (after changing a version)")
    lock.add_argument("sets", nargs="*", metavar="SET", help="the sets to resolve (default: all)")
    lock.set_defaults(func=_lock_jars)


DEBEZIUM_HELP = f"""\
Run Debezium's MariaDB connector (3.5) in Kafka Connect standalone beside the embedded stack: it reads
the stack's MariaDB as a dedicated `debezium` user (SELECT, RELOAD, REPLICATION SLAVE, REPLICATION
CLIENT) and writes to the stack's Kafka, JSON converter with schemas, topics <prefix>.<db>.<table>,
schema changes on <prefix>, heartbeats on __debezium-heartbeat.<prefix>.

Settings a team would use: decimal.handling.mode=precise, time.precision.mode=adaptive_time_microseconds,
bigint.unsigned.handling.mode=precise, include.schema.changes=true, heartbeat.interval.ms=9000 (with
connect.keep.alive.interval.ms=12500, so idle heartbeats come every 10 s); docs/debezium.md says why.

Connect's REST API listens on 127.0.0.1 only; heap {' '.join(HEAP)}. Files (configs, offsets, schema
history, connect.log) live in <state-dir>/debezium/. Standalone Connect is at-least-once: after a crash it
re-sends what it produced since its last offset flush (10 s); lakesync's sink absorbs replays by the
source position of each change.

  lakesync dev debezium up --database bank --topic-prefix dbz
  lakesync dev debezium status
  lakesync dev debezium down [--reset]
"""


def _register_debezium(actions: argparse._SubParsersAction) -> None:
    debezium = actions.add_parser("debezium", help="run Debezium's MariaDB connector (Kafka Connect standalone) "
                                  "beside the stack", description=DEBEZIUM_HELP,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = debezium.add_subparsers(title="actions", metavar="ACTION", required=True)
    up = steps.add_parser("up", help="start the connector and wait until its task runs")
    up.add_argument("--database", action="append", metavar="DB",
                    help="a database to capture (repeatable; default: the demo database, bank)")
    up.add_argument("--table", action="append", default=[], metavar="DB.TABLE",
                    help="capture only these tables (repeatable; default: every table of the databases)")
    up.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX,
                    help=f"Debezium's topic.prefix: topics <prefix>.<db>.<table> (default {DEFAULT_TOPIC_PREFIX})")
    up.add_argument("--snapshot-mode", choices=SNAPSHOT_MODES, default="initial",
                    help="initial (default): read the existing rows first, then stream; no_data: record the "
                    "schema and the current binlog position only, then stream")
    up.add_argument("--server-id", type=int, default=DEFAULT_SERVER_ID,
                    help=f"the connector's replica id on MariaDB, unique among binlog readers (default "
                    f"{DEFAULT_SERVER_ID})")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the task (default 120)")
    up.set_defaults(func=_debezium_up)
    down = steps.add_parser("down", help="stop Connect (offsets are flushed: a restart re-sends nothing)")
    down.add_argument("--reset", action="store_true",
                      help="also forget the offsets and schema history: the next `up` snapshots afresh")
    down.set_defaults(func=_debezium_down)
    steps.add_parser("status", help="the worker's and the connector task's state").set_defaults(func=_debezium_status)


def _debezium_up(args: argparse.Namespace) -> int:
    stack = _stack(args)
    if not stack.exists() or not stack.broker.is_running() or not stack.mariadb.is_running():
        raise StackError(f"the embedded stack in {stack.state_dir} is not running, so Debezium has nothing to read "
                         "or write to", hint="start it with `lakesync dev up` (same --state-dir)")
    connector = ConnectorSettings(databases=tuple(args.database or [stack.settings.demo_database]),
                                  tables=tuple(args.table), topic_prefix=args.topic_prefix,
                                  snapshot_mode=args.snapshot_mode, server_id=args.server_id,
                                  name=DEFAULT_CONNECTOR_NAME)
    with Console(stderr=True).status("starting Kafka Connect with Debezium's MariaDB connector..."):
        stack.start_debezium(connector, timeout=args.timeout)
    _print_debezium(stack)
    return 0


def _debezium_down(args: argparse.Namespace) -> int:
    stack = _stack(args)
    connect = stack.debezium()
    connect.stop()
    if args.reset:
        connect.reset()
        print("stopped; offsets and schema history removed (the next `up` snapshots afresh)")
    else:
        print("stopped")
    return 0


def _debezium_status(args: argparse.Namespace) -> int:
    stack = _stack(args)
    if not (stack.debezium_home / "connector.json").exists():
        print(f"Debezium was never started in {stack.state_dir} (start it with `lakesync dev debezium up`)")
        return 1
    return 0 if _print_debezium(stack) else 1


def _print_debezium(stack: DevStack) -> bool:
    """Print Debezium's state; True when the worker runs and every task is RUNNING."""
    info = stack.debezium_status()
    running = bool(info["running"])
    tasks = [str(state) for state in info["tasks"]] if running and isinstance(info["tasks"], list) else []
    databases = [str(name) for name in info["databases"]] if isinstance(info["databases"], list) else []
    table = Table(title=f"Debezium beside {stack.state_dir}")
    for column in ("connector", "tasks", "REST", "topics", "log"):
        table.add_column(column)
    shown = ", ".join(tasks) or ("no task yet" if running else "not running")
    table.add_row(str(info["connector"]), shown, str(info["address"]),
                  f"{info['topic_prefix']}.<{'|'.join(databases)}>.<table>", str(info["log"]))
    Console().print(table)
    return running and bool(tasks) and all(state == "RUNNING" for state in tasks)


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
