"""The line of a Spark failure lakesync shows (pure text handling, no JVM)."""

from __future__ import annotations

from lakesync.spark.errors import spark_error_line

PY4J = ("An error occurred while calling o54.sql.\n"
        ": org.apache.spark.sql.delta.DeltaTableFeatureException: [DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT] Your "
        "table schema requires manually enablement of the following table feature(s): timestampNtz.\n"
        "\n\tat org.apache.spark.sql.delta.DeltaErrorsBase.tableFeaturesRequireManualEnablementException(...)\n")


def test_a_py4j_error_is_shown_by_the_jvm_exception_it_carries_not_by_the_call():
    line = spark_error_line(Exception(PY4J))
    assert line.startswith("org.apache.spark.sql.delta.DeltaTableFeatureException: [DELTA_FEATURES_REQUIRE")
    assert "An error occurred while calling" not in line and "\tat " not in line


def test_a_plain_error_keeps_its_first_line_and_an_empty_one_its_type():
    assert spark_error_line(ValueError("bad value\nmore")) == "bad value"
    assert spark_error_line(KeyError()) == "KeyError"
    assert len(spark_error_line(Exception("x" * 900), limit=300)) == 300
