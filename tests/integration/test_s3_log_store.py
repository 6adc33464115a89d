"""Two Spark drivers committing to one Delta table on S3 lose nothing with lakesync's conditional-PUT LogStore.

Each driver is a process of its own (its own JVM, ``local[1]``), as two drivers of a deployment are; each
appends one row at a time. A Python UDF in each write makes the drivers meet inside their writes, after both
transactions have read the table's version and before either commits, so in every round both try to commit
the same version (timed slots alone did not do it on a loaded machine: a write there took longer than any
slot, and the drivers drifted apart). The verdict comes from outside Spark: the test oracle replays the Delta
log from S3 itself, and the log is listed for gaps.

That the drivers raced is checked too, so that the test cannot pass without racing: Delta's commit attempts outnumber
the commits (the first round's collision is certain, both drivers having read version 0 before either
commits). A loser finds the version taken in one of two ways: by the LogStore's ``exists()`` check when the
winner's PUT came first, or, when both got past that check, by S3 refusing its conditional PUT (412). Which
one is a matter of milliseconds (from none to all five rounds ended in a 412 in runs on a 2-core machine), so
the 412s are counted in the object store's request log and must each have reached Delta as a lost race, but
are not required to occur; the deterministic tests below cover that path every time.

Delta's default LogStore losing a commit in the same race is timing-dependent (it needs both drivers' check
and PUT to interleave), so it is not raced here; the deterministic tests below put another writer's commit
file in place between a LogStore's check and its PUT instead, which shows the loss with the default LogStore
and the refusal with lakesync's, every time.

Run as a script, this file is the driver process (``append`` or ``interleave``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
BUCKET = "lake"
WRITERS = ("A", "B")
#: Appends per driver, each a round of the race.
ROUNDS = 5
#: A driver's JVM can take long to start while the machine runs other tests; so can a write.
START_TIMEOUT_S = 240.0
ROUND_TIMEOUT_S = 60.0
_COMMIT_FILE = re.compile(r"/_delta_log/(\d{20})\.json$")


@pytest.fixture(scope="module")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, str]]]:
    """The dev kit's S3 endpoint (moto, which honours ``If-None-Match: *``) with an empty bucket."""
    from lakesync_devkit.dev.object_store import REGION, ObjectStore
    from lakesync_devkit.dev.processes import free_port

    store = ObjectStore(home=tmp_path_factory.mktemp("object_store"), port=free_port(), access_key="lakesync",
                        secret_key="lakesync-secret")
    store.start()
    try:
        store.ensure_bucket(BUCKET)
        yield store, {"AWS_ENDPOINT_URL": store.endpoint, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": store.access_key,
                      "AWS_SECRET_ACCESS_KEY": store.secret_key, "AWS_ALLOW_HTTP": "true"}
    finally:
        store.stop()


def _driver(command: str, workdir: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    """This file as a Spark driver process running ``command``, in ``workdir`` (Spark leaves folders where it
    runs); its output goes to ``<workdir>/<name>.log``."""
    from lakesync.jvm.log_store import log_store_jar

    log_store_jar()  # built here once, not by the drivers at the same time
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO / "include"), str(REPO / "devkit"), str(REPO),
                                          os.environ.get("PYTHONPATH", "")])}
    log = (workdir / f"{name}.log").open("wb")
    with log:
        return subprocess.Popen([sys.executable, __file__, command, str(workdir), *args], env=env, cwd=workdir,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def _wait_for(paths: list[Path], drivers: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Until the drivers have written ``paths``; a driver that fails, or all ending without them, fails the test
    (the drivers' logs are in the folder of ``paths``)."""
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        failed = [driver.returncode for driver in drivers if driver.poll() not in (None, 0)]
        assert not failed, f"a driver failed with exit code {failed}; its log is in {paths[0].parent}"
        assert any(driver.poll() is None for driver in drivers), f"the drivers ended without writing {paths}"
        assert time.monotonic() < deadline, f"the drivers did not write {paths} in {timeout:.0f}s"
        time.sleep(0.2)


def _commit_versions(client: Any, prefix: str) -> list[int]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/_delta_log/")
    return sorted(int(m[1]) for page in pages for item in page.get("Contents", [])
                  if (m := _COMMIT_FILE.search("/" + item["Key"])))


def _refused_commit_puts(store_log: Path, prefix: str) -> int:
    """PUTs of the table's commit files that the object store answered 412 (its request log, colours and all)."""
    pattern = re.compile(rf"PUT /{BUCKET}/{re.escape(prefix)}/_delta_log/\d{{20}}\.json HTTP/[\d.]+\S*\" 412 ")
    return len(pattern.findall(store_log.read_text(errors="replace")))


def test_two_drivers_racing_for_each_version_lose_no_commit(object_store, tmp_path: Path) -> None:
    import boto3
    import pyarrow as pa
    from deltalake import write_deltalake

    from tests.oracle import read_delta_table

    store, options = object_store
    prefix = "race"
    uri = f"s3://{BUCKET}/{prefix}"
    write_deltalake(uri, pa.table({"writer": ["init"], "i": pa.array([-1], pa.int32())}), storage_options=options)

    drivers = [_driver("append", tmp_path, f"append-{tag}", tag, f"s3a://{BUCKET}/{prefix}", json.dumps(options))
               for tag in WRITERS]
    try:
        _wait_for([tmp_path / f"result-{tag}.json" for tag in WRITERS], drivers,
                  START_TIMEOUT_S + ROUNDS * ROUND_TIMEOUT_S)
        for driver in drivers:
            driver.wait(timeout=60)
    finally:
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
    results = {tag: json.loads((tmp_path / f"result-{tag}.json").read_text()) for tag in WRITERS}

    assert all(not result["errors"] for result in results.values()), results
    appended = Counter([("init", -1)] + [(tag, i) for tag, result in results.items() for i in result["ok"]])
    table = read_delta_table(uri, options)
    assert Counter(zip(table.column("writer").to_pylist(), table.column("i").to_pylist(), strict=True)) == appended
    client = boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name=options["AWS_REGION"],
                          aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"])
    assert _commit_versions(client, prefix) == list(range(sum(appended.values())))  # one commit each, no gap
    logs = "".join((tmp_path / f"append-{tag}.log").read_text(errors="replace") for tag in WRITERS)
    attempts = len(re.findall(r"Attempting to commit version \d+", logs))  # Delta's log line, one per attempt
    appends = sum(len(result["ok"]) for result in results.values())
    assert attempts > appends, "the drivers never raced for a version: the test proved nothing"
    # each 412 reached Delta as a lost race (which it retried: no append failed)
    assert logs.count("conditional PUT refused") == _refused_commit_puts(store.log_file, prefix)


@pytest.fixture(scope="module")
def interleaved(object_store, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What each LogStore did when another writer's commit file appeared between its check and its PUT."""
    _, options = object_store
    workdir = tmp_path_factory.mktemp("interleave")
    driver = _driver("interleave", workdir, "interleave", json.dumps(options))
    try:
        _wait_for([workdir / "result.json"], [driver], START_TIMEOUT_S)
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    return json.loads((workdir / "result.json").read_text())


def test_delta_default_s3_log_store_replaces_a_commit_another_writer_made_after_its_check(interleaved) -> None:
    """Why lakesync has its own LogStore. Should this fail, Delta's default no longer loses the commit."""
    assert interleaved["S3SingleDriverLogStore"] == {"raised": None, "stored": "ours\n"}


def test_conditional_put_log_store_refuses_a_commit_another_writer_made_after_its_check(interleaved) -> None:
    assert interleaved["ConditionalPutS3LogStore"] == {"raised": "java.nio.file.FileAlreadyExistsException",
                                                       "stored": "theirs\n"}


def test_conditional_put_log_store_still_overwrites_when_asked_and_refuses_an_existing_file(interleaved) -> None:
    assert interleaved["overwrite"] == {"raised": None, "stored": "again\n"}
    assert interleaved["existing"] == {"raised": "java.nio.file.FileAlreadyExistsException", "stored": "again\n"}


def test_conditional_put_log_store_uploads_nothing_when_a_commit_fails_while_being_written(interleaved) -> None:
    assert interleaved["failed midway"] == {"raised": "py4j.Py4JException", "stored": None}


# -- the driver processes ------------------------------------------------------------------------------------


def _session(name: str, options: dict[str, str]) -> Any:
    from lakesync.jvm.log_store import log_store_conf, log_store_jar
    from lakesync.spark.session import build_spark_session, spark_jars
    from lakesync.spark.storage import hadoop_s3a_conf

    conf = {**hadoop_s3a_conf(options), **log_store_conf(), "spark.driver.memory": "1g",
            "spark.jars": ",".join([*spark_jars(), str(log_store_jar())])}
    spark = build_spark_session(name, master="local[1]", extra_conf=conf)
    log4j = spark._jvm.org.apache.logging.log4j
    for logger in ("io.lakesync.delta", "org.apache.spark.sql.delta.OptimisticTransaction"):  # lost races, attempts
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.INFO)
    return spark


def _meet(writer: str, round_: int, folder: str) -> str:
    """The UDF in each write: wait (in the write's task, after its transaction read the table's version) until
    the other driver's write of the round is there too, or that driver is gone."""
    Path(folder, f"met-{writer}-{round_}").touch()
    others = [w for w in WRITERS if w != writer]
    deadline = time.monotonic() + (START_TIMEOUT_S if round_ == 0 else ROUND_TIMEOUT_S)
    while time.monotonic() < deadline and not all(
            Path(folder, f"met-{w}-{round_}").exists() or Path(folder, f"done-{w}").exists() for w in others):
        time.sleep(0.02)
    return writer


def _append_in_rounds(workdir: Path, tag: str, path: str, options: dict[str, str]) -> None:
    from pyspark.sql import functions as F

    try:
        spark = _session(f"log-store-race-{tag}", options)
        meet = F.udf(_meet, "string").asNondeterministic()
        ok, errors = [], []
        for i in range(ROUNDS):
            row = spark.range(1).select(meet(F.lit(tag), F.lit(i), F.lit(str(workdir))).alias("writer"),
                                        F.lit(i).alias("i"))
            try:
                row.write.format("delta").mode("append").save(path)
                ok.append(i)
            except Exception as exc:  # reported, and failed on, by the test
                errors.append(f"{i}: {(str(exc).splitlines() or [''])[0][:500]}")
        (workdir / f"result-{tag}.json").write_text(json.dumps({"ok": ok, "errors": errors}))
        spark.stop()
    finally:
        (workdir / f"done-{tag}").touch()  # the other driver stops waiting for this one


def _interleave(workdir: Path, options: dict[str, str]) -> None:
    import boto3
    from py4j.protocol import Py4JJavaError
    from pyspark.java_gateway import ensure_callback_server_started

    spark = _session("log-store-interleave", options)
    ensure_callback_server_started(spark.sparkContext._gateway)
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    client = boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name=options["AWS_REGION"],
                          aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"])

    class TheirsFirst:
        """A commit's lines, as a Java iterator that puts another writer's file in place when first read:
        after the LogStore checked the file is absent, before it uploads. A line ``None`` fails the read, as a
        commit whose actions can't be produced."""

        def __init__(self, key: str | None, lines: list[str | None]) -> None:
            self.key, self.lines = key, lines

        def hasNext(self) -> bool:  # java.util.Iterator's name
            return bool(self.lines)

        def next(self) -> str:
            if self.key:
                client.put_object(Bucket=BUCKET, Key=self.key, Body=b"theirs\n")
                self.key = None
            line = self.lines.pop(0)
            if line is None:
                raise RuntimeError("the commit's actions failed")
            return line

        class Java:
            implements = ["java.util.Iterator"]  # noqa: RUF012 (py4j's protocol)

    def write(store: Any, key: str, lines: list[str | None], *, theirs_first: bool, overwrite: bool
              ) -> dict[str, Any]:
        raised = stored = None
        try:
            store.write(jvm.org.apache.hadoop.fs.Path(f"s3a://{BUCKET}/{key}"),
                        TheirsFirst(key if theirs_first else None, lines), overwrite, conf)
        except Py4JJavaError as exc:
            raised = exc.java_exception.getClass().getName()
        with contextlib.suppress(client.exceptions.NoSuchKey):
            stored = client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
        return {"raised": raised, "stored": stored}

    plain = jvm.io.delta.storage.S3SingleDriverLogStore(conf)
    conditional = jvm.io.lakesync.delta.ConditionalPutS3LogStore(conf)
    commit = "interleave/{}/_delta_log/00000000000000000001.json"
    result = {
        "S3SingleDriverLogStore": write(plain, commit.format("plain"), ["ours"], theirs_first=True, overwrite=False),
        "ConditionalPutS3LogStore": write(conditional, commit.format("conditional"), ["ours"], theirs_first=True,
                                          overwrite=False),
        "overwrite": write(conditional, commit.format("conditional"), ["again"], theirs_first=False, overwrite=True),
        "existing": write(conditional, commit.format("conditional"), ["ours"], theirs_first=False, overwrite=False),
        "failed midway": write(conditional, commit.format("failed"), ["ours", None], theirs_first=False,
                               overwrite=False),
    }
    (workdir / "result.json").write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    command, folder, *rest = sys.argv[1:]
    if command == "append":
        _append_in_rounds(Path(folder), rest[0], rest[1], json.loads(rest[2]))
    else:
        _interleave(Path(folder), json.loads(rest[0]))
