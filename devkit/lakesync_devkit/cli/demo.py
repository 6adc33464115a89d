"""``lakesync demo init|load``: the demo bank database and its steady workload."""

from __future__ import annotations

import argparse

from rich.console import Console

from lakesync_devkit.demo.database import create_demo_database, seed_demo_data
from lakesync_devkit.demo.load import run_load
from lakesync_devkit.dev.stack import DevStack


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="the demo bank database on the embedded stack",
                                 description="Create the demo bank database, or run a steady load of changes on it.")
    demo.add_argument("--state-dir", help="state folder of the embedded stack (default: $LAKESYNC_STATE_DIR or ./.lakesync)")
    actions = demo.add_subparsers(title="actions", metavar="ACTION", required=True)
    init = actions.add_parser("init", help="(re)create and seed the demo database")
    init.add_argument("--replace", action="store_true", help="drop the existing demo database first")
    init.add_argument("--customers", type=int, default=200, help="customers (one account each; default 200)")
    init.add_argument("--transactions", type=int, default=2000, help="bookings to seed (default 2000)")
    init.set_defaults(func=_init)
    load = actions.add_parser(
        "load", help="run inserts, updates and deletes at a steady rate",
        description="Run a steady mix of inserts, updates and deletes (bookings, corrections, reversals, "
                    "customer edits, day-end balances, audit rows) against the demo database.",
    )
    load.add_argument("--rate", type=float, default=100.0,
                      help="transactions per second (default 100; each makes 1 to 3 row changes)")
    load.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    load.add_argument("--seed", type=int, default=7, help="random seed, for a reproducible workload")
    load.set_defaults(func=_load)
    run = actions.add_parser(
        "run", help="run the demo pipeline end to end and show source vs Delta",
        description="Start the embedded stack, recreate the demo bank database, start the relay, run Airflow's "
                    "full-load DAG (snapshot -> Delta, handoff, stream, caught up, validation), run a burst of "
                    "changes, run the stream DAG and compare every table with its source. Exit code 0 when Delta "
                    "matches the source.",
    )
    run.add_argument("--rate", type=float, default=200.0,
                     help="transactions per second in the burst (default 200; each makes 1 to 3 row changes)")
    run.add_argument("--log-stderr", action="store_true",
                     help="also print lakesync's log lines on stderr (default: only to <state dir>/logs/demo.log)")
    run.add_argument("--seconds", type=float, default=5.0, help="length of the burst (default 5)")
    run.add_argument("--without-airflow", action="store_true",
                     help="run the full load and the stream in this process instead of through Airflow's DAGs")
    run.add_argument("--keep", action="store_true",
                     help="keep the demo database and the pipeline's Delta tables and state from the last run")
    run.set_defaults(func=_run)


def _init(args: argparse.Namespace) -> int:
    stack = DevStack(args.state_dir)
    with stack.mariadb.connect() as conn:
        create_demo_database(conn, stack.settings.demo_database, replace=args.replace)
        seed_demo_data(conn, stack.settings.demo_database, customers=args.customers,
                       transactions=args.transactions)
    print(f"demo database {stack.settings.demo_database!r} ready")
    return 0


def _run(args: argparse.Namespace) -> int:
    from lakesync_devkit.demo.run import run_demo

    report = run_demo(args.state_dir, rate=args.rate, seconds=args.seconds, fresh=not args.keep,
                      airflow=not args.without_airflow, log_stderr=args.log_stderr)
    return 0 if report.matches else 3


def _load(args: argparse.Namespace) -> int:
    if args.rate <= 0 or args.seconds <= 0:
        raise SystemExit("error: --rate and --seconds must be positive")
    stack = DevStack(args.state_dir)
    console = Console(stderr=True)
    with stack.mariadb.connect(autocommit=False) as conn, console.status("running load...") as status:
        report = run_load(conn, stack.settings.demo_database, rate=args.rate, seconds=args.seconds, seed=args.seed,
                          on_progress=lambda progress: status.update(f"load: {progress.summary()}"))
    print(report.summary())
    return 0
