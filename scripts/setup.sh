#!/usr/bin/env bash
# Install what lakesync needs on a Debian/Ubuntu machine, idempotently: the MariaDB server and client,
# the MariaDB JDBC driver (for the Spark JDBC baseline), a JDK (Spark, the Kafka broker, lakesync's S3 LogStore), Chromium
# (UI test), then a virtualenv at .venv with the project installed, and the pinned JVM jars (delta-spark,
# Spark's Kafka connector, Apache Kafka, Debezium) from Maven Central into the jar cache
# ($LAKESYNC_JARS_DIR, default ~/.cache/lakesync/jars). Re-running it does only what is missing; once the
# jars are cached everything runs offline.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

need_apt=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need_apt+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need_apt+=(mariadb-client)
[ -f /usr/share/java/mariadb-java-client.jar ] || need_apt+=(libmariadb-java)
# A JDK, not only a runtime: lakesync's Delta LogStore for S3 is compiled once from its source (javac).
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
# The production shape's Airflow metadata database (lakesync dev up --shape production).
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need_apt+=(postgresql)
if [ "${LAKESYNC_SKIP_BROWSER:-0}" != "1" ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing system packages: ${need_apt[*]}"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
  # Debian's package starts a system MariaDB we don't use; lakesync runs its own on loopback.
  $SUDO service mariadb stop >/dev/null 2>&1 || true
  # Likewise the cluster Debian's postgresql package may start: the production shape runs its own.
  $SUDO service postgresql stop >/dev/null 2>&1 || true
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating the virtualenv .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.lakesync-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ devkit/pyproject.toml -nt "$stamp" ]; then
  echo "==> installing lakesync and its dependencies into .venv (first time: a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test]" -e ./devkit
  touch "$stamp"
fi
# The JVM jars, checked against their pinned SHA-256 (retried on network errors; present ones are kept).
.venv/bin/lakesync jars fetch
