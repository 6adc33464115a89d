"""The class archive is really used by a lakesync Spark driver, and a refused one changes nothing.

Verdicts come from the JVM's own class-loading log (which file each class came from), not from lakesync."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakesync.jvm.class_archive import archive_file, build_archive, driver_java_options
from lakesync.spark.session import submit_args

pytestmark = [pytest.mark.integration, pytest.mark.spark]

APP = "from lakesync.spark.session import build_spark_session\nbuild_spark_session('probe').range(3).count()\n"


def test_a_spark_submit_with_lakesyncs_settings_maps_spark_classes_from_the_archive(tmp_path: Path) -> None:
    path, _ = build_archive()  # the setup built it; a fresh checkout builds it here once
    options = driver_java_options()
    assert options is not None and str(path) in options and path == archive_file()
    script = tmp_path / "probe.py"
    script.write_text(APP)
    loads = tmp_path / "class-load.log"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]", *submit_args(),
         "--conf", f"spark.driver.extraJavaOptions={options} -Xlog:class+load=info:file={loads}", str(script)],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # Spark's classes the JVM took from the archive, and those it read from a jar file (lambdas are generated)
    spark_classes = [line for line in loads.read_text().splitlines() if " org.apache.spark." in line]
    from_archive = [line for line in spark_classes if "source: shared objects file (top)" in line]
    from_jars = [line for line in spark_classes if "source: file:" in line or "source: jar:" in line]
    assert len(from_archive) > 1000 and len(from_archive) > 10 * len(from_jars), (len(from_archive), from_jars[:5])
    assert "cds" not in done.stdout, "a JVM message reached the app's stdout"


def test_a_jvm_whose_classpath_does_not_match_the_archive_starts_normally_and_silently(tmp_path: Path) -> None:
    path, _ = build_archive()
    java = (Path(os.environ["JAVA_HOME"]) / "bin" / "java") if os.environ.get("JAVA_HOME") else "java"
    probe = tmp_path / "Probe.java"
    probe.write_text('public class Probe { public static void main(String[] a) { System.out.println("ran"); } }')
    done = subprocess.run([str(java), *str(driver_java_options()).split(), "-cp", str(tmp_path), str(probe)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n", done.stdout
    assert str(path) in str(driver_java_options())
