"""``lakesync jars``: the pinned JVM jars (fetch them once, list them, or give them to your own cluster)."""

from __future__ import annotations

import argparse

from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn

from lakesync.jvm.artifacts import LockedJar

DESCRIPTION = """\
lakesync's JVM jars are pinned in lakesync/jvm/jars.toml (Maven coordinates and SHA-256) and kept in a
cache ($LAKESYNC_JARS_DIR, default ~/.cache/lakesync/jars). `fetch` downloads the missing ones from Maven
Central ($LAKESYNC_MAVEN_REPOSITORY for a mirror), checks each checksum, and after that everything runs
offline. Nothing reads or writes ~/.m2 or ~/.ivy2.

  lakesync jars fetch            every set (spark, and the dev kit's kafka and debezium)
  lakesync jars fetch spark      one set
  lakesync jars list spark       the cached paths (a classpath with --classpath)
  lakesync jars packages         the --packages coordinates for your own Spark cluster, and an ivySettings
                                 file that resolves from Maven Central only, with lakesync's Delta LogStore
                                 for S3 (--jars and --conf; see docs/deployment.md)

`fetch` also builds that LogStore (a small jar of lakesync's own, compiled once with a JDK's javac).
"""


def _fetch(args: argparse.Namespace) -> int:
    from lakesync.jvm.artifacts import jar_set, jar_sets
    from lakesync.jvm.fetch import cache_dir, ensure_jars, missing_jars

    names = args.sets or [name for name, found in jar_sets().items() if found.jars]
    for name in names:
        missing = missing_jars(jar_set(name))
        if not missing:
            print(f"{name}: all {len(jar_set(name).jars)} jars are in {cache_dir()}")
            continue
        with Progress(TextColumn(f"{name}"), BarColumn(), DownloadColumn(), transient=True) as progress:
            task = progress.add_task(name, total=sum(jar.size for jar in missing))

            def advance(jar: LockedJar, task: TaskID = task) -> None:
                progress.advance(task, jar.size)

            ensure_jars(name, progress=advance)
        print(f"{name}: fetched {len(missing)} jars ({sum(j.size for j in missing) / 1e6:.1f} MB) into {cache_dir()}")
    if "spark" in names:
        from lakesync.jvm.log_store import log_store_jar

        print(f"Delta LogStore for S3: {log_store_jar()}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from lakesync.jvm.fetch import ensure_jars

    paths = ensure_jars(args.set, offline=True)
    print(":".join(map(str, paths)) if args.classpath else "\n".join(map(str, paths)))
    return 0


def _packages(args: argparse.Namespace) -> int:
    from lakesync.jvm.log_store import log_store_conf, log_store_jar
    from lakesync.spark.packages import spark_packages, write_ivy_settings

    print(f"--packages {spark_packages()}")
    print(f"--jars {log_store_jar()}")  # lakesync's own Delta LogStore for S3, not on Maven Central
    for key, value in log_store_conf().items():
        print(f"--conf {key}={value}")
    if args.ivy_settings:
        write_ivy_settings(args.ivy_settings)
        print(f"--conf spark.jars.ivySettings={args.ivy_settings}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("jars", help="the pinned JVM jars: fetch, list, --packages for a cluster",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    fetch = actions.add_parser("fetch", help="download the missing jars of the named sets (default: all)")
    fetch.add_argument("sets", nargs="*", metavar="SET", help="spark, kafka or debezium (default: all)")
    fetch.set_defaults(func=_fetch)
    listing = actions.add_parser("list", help="the cached jar paths of a set (fails when one is missing)")
    listing.add_argument("set", metavar="SET")
    listing.add_argument("--classpath", action="store_true", help="print them as one ':'-joined classpath")
    listing.set_defaults(func=_list)
    packages = actions.add_parser("packages", help="the spark-submit --packages coordinates for your cluster")
    packages.add_argument("--ivy-settings", metavar="FILE",
                          help="also write an ivySettings file that resolves from Maven Central only")
    packages.set_defaults(func=_packages)
