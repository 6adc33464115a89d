"""What a Spark failure says, in one line a user can act on.

PySpark raises a JVM exception it does not translate (Delta's own, for example) as ``Py4JJavaError``, whose
first line only names the call ("An error occurred while calling o54.sql."); the JVM exception's class and
message follow it (": org.apache.spark.sql.delta.DeltaTableFeatureException: [DELTA_...] ..."). Errors
lakesync raises from Spark work carry that line; the JVM stack trace stays in the log.
"""

from __future__ import annotations

_PY4J_CALL = "An error occurred while calling"


def spark_error_line(exc: BaseException, *, limit: int = 500) -> str:
    """The first line of ``exc`` that says what went wrong (not Py4J's line naming the call), at most ``limit``
    characters; the exception's type name when it has no text."""
    lines = [line.strip().removeprefix(":").strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    said = next((line for line in lines if not line.startswith(_PY4J_CALL)), lines[0] if lines else "")
    return (said or type(exc).__name__)[:limit]
