"""``lakesync bench snapshot``: the full load against two baselines, measured in the same run.

One run builds an N-row table like the demo's ``transactions`` (8 columns: BIGINT UNSIGNED key, CHAR,
DECIMAL, ENUM, VARCHAR, TEXT with NULLs, two DATETIME(6)) and measures, best of ``--rounds`` each:

(a) the ``mariadb`` client dumping the table to /dev/null (``--quick --batch``): the floor of what reading
    the rows out of the server costs, with no typing and no writing;
(b) what a user would write by hand with Spark: a JDBC read (MariaDB Connector/J from Debian, 2 partitions
    by id) written to Delta by delta-spark;
(c) lakesync's full load of the table into Delta (consistent mode by default: one snapshot, exact
    position, one commit; ``--mode chunked`` measures the lock-free mode on a local thread pool);
(d) the same load with ``delta.writer: delta_spark`` (Spark writes the table from the load's files, in the
    session (b) started: warm, as in the Airflow task that runs the load);
(e) dlt (dlthub's data load tool) loading the table into Delta: its ``sql_table`` source with the pyarrow
    backend, the filesystem destination with ``table_format="delta"``, ``write_disposition="replace"``.

The targets: (c) >= 0.5x (a), >= 2x (b) and >= 2x (e); (d) is reported against (b) and (e) too. ``peak_rss_mb`` is this process's peak after (c), before
Spark runs. Uses the embedded stack at ``$LAKESYNC_STATE_DIR`` when one is running there, else starts
one in a temporary folder and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from lakesync.core.config import Pipeline, parse_pipeline
from lakesync.core.errors import StackError
from lakesync.full_load.load import FullLoad
from lakesync_devkit.bench.harness import peak_rss_mb
from lakesync_devkit.demo.database import create_demo_database, seed_transactions
from lakesync_devkit.dev.stack import MYSQL_CONN_ID, STATE_DIR_ENV, DevStack

log = logging.getLogger(__name__)
DEFAULT_ROWS = 1_000_000
TABLE = "transactions"
CONNECTOR_J = Path("/usr/share/java/mariadb-java-client.jar")


@dataclass
class SnapshotBenchResult:
    rows: int
    lakesync_rows_per_s: float
    client_dump_rows_per_s: float
    spark_jdbc_rows_per_s: float
    ratio_vs_client_dump: float
    ratio_vs_spark_jdbc: float
    #: (d): the load committed by delta-spark, and its ratio to (b)
    delta_spark_load_rows_per_s: float
    delta_spark_load_ratio_vs_spark_jdbc: float
    #: (e): dlt, and the ratios of (c) and (d) to it
    dlt_rows_per_s: float
    ratio_vs_dlt: float
    delta_spark_load_ratio_vs_dlt: float
    peak_rss_mb: float
    lakesync_seconds: float
    client_dump_seconds: float
    spark_jdbc_seconds: float
    #: CPU seconds (server + client side) of each measured run: unlike rows/s, not moved by other work on
    #: a shared machine.
    lakesync_cpu_s: float
    client_dump_cpu_s: float
    spark_jdbc_cpu_s: float


@dataclass(frozen=True)
class _Run:
    seconds: float
    cpu_seconds: float


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def _measured(work: Callable[[], None], pids: list[int]) -> _Run:
    """Wall time of ``work`` and the CPU it cost: this process, its finished children, and ``pids``."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before, others_before = time.process_time(), _cpu_of(pids)
    began = time.perf_counter()
    work()
    seconds = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    cpu = time.process_time() - cpu_before + _cpu_of(pids) - others_before + child_cpu
    return _Run(seconds, cpu)


def _fastest(runs: list[_Run]) -> _Run:
    """The machine is shared: the fastest run is the least disturbed one."""
    return min(runs, key=lambda run: run.seconds)


def client_dump(stack: DevStack, database: str) -> None:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        raise StackError("the mariadb client is not installed", hint="sudo apt-get install -y mariadb-client")
    settings = stack.settings
    env = {**os.environ, "MYSQL_PWD": settings.root_password}  # not on the command line, where ps shows it
    subprocess.run(
        [client, "--quick", "--batch", "-h", "127.0.0.1", "-P", str(settings.mariadb_port), "-u", "root",
         "-e", f"SELECT * FROM `{database}`.`{TABLE}`"],
        stdout=subprocess.DEVNULL, env=env, check=True,
    )


def lakesync_load(pipeline: Pipeline, mode: str) -> None:
    """One load of the table; fails unless it made a new commit (every round must do the whole work, also when
    the source has not moved since the round before)."""
    from deltalake import DeltaTable

    uri = pipeline.delta.table_uri(TABLE)
    before = DeltaTable(uri).version() if DeltaTable.is_deltatable(uri) else -1
    (result,) = FullLoad(pipeline, tables=[TABLE], mode=mode, restart=True).run()
    if result.delta_version is None or result.delta_version <= before:
        raise StackError(f"the load made no new commit of {uri} (version {result.delta_version})")
    log.info("lakesync loaded %d rows (version %d)", result.rows, result.delta_version)


def spark_jdbc_to_delta(spark: Any, stack: DevStack, database: str, rows: int, delta_uri: str) -> None:
    settings = stack.settings
    frame = (
        spark.read.format("jdbc")
        # The mysql scheme makes Spark use its MySQL dialect (backtick quoting); Connector/J 2.x takes it
        # with permitMysqlScheme. Under jdbc:mariadb: Spark quotes columns with '"' and reads literals.
        .option("url", f"jdbc:mysql://127.0.0.1:{settings.mariadb_port}/{database}?permitMysqlScheme")
        .option("driver", "org.mariadb.jdbc.Driver").option("dbtable", TABLE)
        .option("user", "root").option("password", settings.root_password)
        .option("partitionColumn", "id").option("lowerBound", "1").option("upperBound", str(rows + 1))
        .option("numPartitions", "2").option("fetchsize", "10000")
        .load()
    )
    frame.write.format("delta").mode("overwrite").save(delta_uri)


def dlt_to_delta(stack: DevStack, database: str, rows: int, work_dir: Path) -> None:
    """The table loaded by dlt into a Delta table under ``work_dir`` (telemetry off: nothing leaves the machine);
    fails unless that table then holds ``rows`` rows."""
    os.environ["RUNTIME__DLTHUB_TELEMETRY"] = "false"
    import dlt
    from dlt.sources.sql_database import sql_table
    from sqlalchemy import create_engine
    from sqlalchemy.engine import URL

    settings = stack.settings
    engine = create_engine(URL.create("mysql+pymysql", username="root", password=settings.root_password,
                                      host="127.0.0.1", port=settings.mariadb_port, database=database))
    pipeline = dlt.pipeline(pipeline_name="bench_snapshot_dlt", pipelines_dir=str(work_dir / "dlt_state"),
                            destination=dlt.destinations.filesystem(bucket_url=str(work_dir / "dlt")),
                            dataset_name="bench")
    try:
        pipeline.run(sql_table(credentials=engine, table=TABLE, backend="pyarrow"),
                     write_disposition="replace", table_format="delta")
    finally:
        engine.dispose()
    from deltalake import DeltaTable

    loaded = DeltaTable(str(work_dir / "dlt" / "bench" / TABLE)).to_pyarrow_dataset().count_rows()
    if loaded != rows:
        raise StackError(f"dlt loaded {loaded} rows of {rows}", hint="see dlt's log above")


def _spark_session() -> Any:
    from lakesync.spark.session import build_spark_session, spark_jars

    if not CONNECTOR_J.exists():
        raise StackError(f"MariaDB Connector/J is not at {CONNECTOR_J}",
                         hint="sudo apt-get install -y libmariadb-java")
    return build_spark_session("lakesync-bench-snapshot-jdbc",
                               extra_conf={"spark.jars": ",".join([*spark_jars(), str(CONNECTOR_J)])})


def _pipeline(database: str, work_dir: Path, writer: str) -> Pipeline:
    return parse_pipeline({
        "name": f"bench_snapshot_{writer}", "source": {"conn_id": MYSQL_CONN_ID, "database": database},
        "kafka": {"bootstrap_servers": "127.0.0.1:9", "topic_prefix": "bench"},
        "delta": {"root": str(work_dir / f"lakesync_{writer}"), "writer": writer},
        "state_dir": str(work_dir / f"state_{writer}"),
    }, source_name="bench")


def run_bench(stack: DevStack, rows: int, *, rounds: int = 2, work_dir: Path, mode: str = "consistent"
              ) -> SnapshotBenchResult:
    os.environ.update(stack.connection_env())
    database = f"bench_snapshot_{int(time.time())}"
    pipeline = _pipeline(database, work_dir, "delta_rs")
    with stack.mariadb.connect() as root:
        log.info("building %d rows in %s.%s", rows, database, TABLE)
        create_demo_database(root, database)
        seed_transactions(root, database, rows=rows)
    server = [stack.mariadb.pid() or 0]
    spark = None
    try:
        client_runs, our_runs = [], []
        for _ in range(rounds):  # interleaved, so a busy moment on the machine hits both sides alike
            client_runs.append(_measured(lambda: client_dump(stack, database), server))
            our_runs.append(_measured(lambda: lakesync_load(pipeline, mode), server))
        client, ours = _fastest(client_runs), _fastest(our_runs)
        peak_rss = peak_rss_mb()
        by_dlt = _fastest([_measured(lambda: dlt_to_delta(stack, database, rows, work_dir), server) for _ in range(rounds)])
        spark = _spark_session()
        jvm = [spark.sparkContext._gateway.proc.pid]
        target = str(work_dir / "spark_jdbc" / TABLE)
        jdbc_runs, spark_load_runs = [], []
        spark_pipeline = _pipeline(database, work_dir, "delta_spark")
        for _ in range(rounds):
            jdbc_runs.append(_measured(lambda: spark_jdbc_to_delta(spark, stack, database, rows, target), server + jvm))
            spark_load_runs.append(_measured(lambda: lakesync_load(spark_pipeline, mode), server + jvm))
        jdbc, spark_load = _fastest(jdbc_runs), _fastest(spark_load_runs)
    finally:
        if spark is not None:
            spark.stop()
        with stack.mariadb.connect() as root, root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    return SnapshotBenchResult(
        rows=rows,
        lakesync_rows_per_s=round(rows / ours.seconds, 1),
        client_dump_rows_per_s=round(rows / client.seconds, 1),
        spark_jdbc_rows_per_s=round(rows / jdbc.seconds, 1),
        ratio_vs_client_dump=round(client.seconds / ours.seconds, 3),
        ratio_vs_spark_jdbc=round(jdbc.seconds / ours.seconds, 3),
        delta_spark_load_rows_per_s=round(rows / spark_load.seconds, 1),
        delta_spark_load_ratio_vs_spark_jdbc=round(jdbc.seconds / spark_load.seconds, 3),
        dlt_rows_per_s=round(rows / by_dlt.seconds, 1),
        ratio_vs_dlt=round(by_dlt.seconds / ours.seconds, 3),
        delta_spark_load_ratio_vs_dlt=round(by_dlt.seconds / spark_load.seconds, 3),
        peak_rss_mb=round(peak_rss, 1),
        lakesync_seconds=round(ours.seconds, 3),
        client_dump_seconds=round(client.seconds, 3),
        spark_jdbc_seconds=round(jdbc.seconds, 3),
        lakesync_cpu_s=round(ours.cpu_seconds, 3),
        client_dump_cpu_s=round(client.cpu_seconds, 3),
        spark_jdbc_cpu_s=round(jdbc.cpu_seconds, 3),
    )


def _stack_from_env(cleanup: ExitStack) -> DevStack:
    """The running stack at ``$LAKESYNC_STATE_DIR``, else a fresh one in a temp folder (stopped at the end)."""
    if os.environ.get(STATE_DIR_ENV):
        stack = DevStack(os.environ[STATE_DIR_ENV])
        if stack.exists() and stack.mariadb.is_running():
            return stack
    stack = DevStack(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="lakesync-bench-snapshot-")))
    stack.up()
    cleanup.callback(stack.down)
    return stack


def _run(args: argparse.Namespace) -> int:
    with ExitStack() as cleanup:
        stack = _stack_from_env(cleanup)
        work_dir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="lakesync-bench-delta-")))
        result = run_bench(stack, args.rows, rounds=args.rounds, work_dir=work_dir, mode=args.mode)
    if args.json:
        print(json.dumps(asdict(result)))
        return 0
    print(f"rows:                         {result.rows:,}")
    print(f"(a) mariadb client -> null:   {result.client_dump_rows_per_s:>12,.0f} rows/s "
          f"({result.client_dump_seconds:.2f} s)")
    print(f"(b) Spark JDBC -> Delta:      {result.spark_jdbc_rows_per_s:>12,.0f} rows/s "
          f"({result.spark_jdbc_seconds:.2f} s)")
    print(f"(c) lakesync full load:       {result.lakesync_rows_per_s:>12,.0f} rows/s "
          f"({result.lakesync_seconds:.2f} s)")
    print(f"(d) lakesync, delta-spark:    {result.delta_spark_load_rows_per_s:>12,.0f} rows/s")
    print(f"(e) dlt -> Delta:             {result.dlt_rows_per_s:>12,.0f} rows/s")
    print(f"c/a (target >= 0.5):          {result.ratio_vs_client_dump:.2f}")
    print(f"c/b (target >= 2):            {result.ratio_vs_spark_jdbc:.2f}")
    print(f"d/b (target >= 2):            {result.delta_spark_load_ratio_vs_spark_jdbc:.2f}")
    print(f"c/e (target >= 2):            {result.ratio_vs_dlt:.2f}")
    print(f"d/e (target >= 2):            {result.delta_spark_load_ratio_vs_dlt:.2f}")
    print(f"CPU s (server + client) a/b/c: {result.client_dump_cpu_s:.2f} / {result.spark_jdbc_cpu_s:.2f} / "
          f"{result.lakesync_cpu_s:.2f}")
    print(f"peak RSS (after c):           {result.peak_rss_mb:.0f} MB")
    return 0


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "snapshot", help="full load vs the mariadb client dump and a plain Spark JDBC read to Delta",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"table rows (default {DEFAULT_ROWS:,})")
    parser.add_argument("--rounds", type=int, default=2,
                        help="measure each side this many times and keep the best (default 2)")
    parser.add_argument("--mode", choices=("consistent", "chunked"), default="consistent",
                        help="full-load mode measured as (c) (default consistent; chunked uses a thread pool here)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_run)
