"""Server errors met while reading a table for the load, turned into :class:`LakesyncError` s that name the
table and say what to do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pymysql
from pymysql.constants import ER

from lakesync.core.errors import SchemaChangeError, SourceError

#: The lakesync user lacks SELECT on the table or one of its columns.
_NOT_ALLOWED = (ER.TABLEACCESS_DENIED_ERROR, ER.COLUMNACCESS_DENIED_ERROR)
#: The table went away or changed under the read (dropped, altered, a column gone).
_CHANGED = (ER.NO_SUCH_TABLE, ER.TABLE_DEF_CHANGED, ER.BAD_FIELD_ERROR)


@contextmanager
def read_errors(table: str) -> Iterator[None]:
    """Turns server errors met while reading ``table`` into :class:`LakesyncError` s that name the table."""
    try:
        yield
    except pymysql.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        message = exc.args[-1] if exc.args else str(exc)
        if code in _NOT_ALLOWED:
            raise SourceError(
                f"the lakesync user may not read table {table}: {message}",
                hint=f"GRANT SELECT ON <database>.{table} (or the whole database) TO the lakesync user",
            ) from exc
        if code in _CHANGED:
            raise SchemaChangeError(
                f"table {table} was dropped or altered while it was being loaded: {message}",
                hint=f"nothing of {table} was committed; run the load again (add --tables {table})",
            ) from exc
        raise SourceError(f"reading table {table} failed: {message}",
                          hint="nothing of this table was committed; run the load again to resume") from exc
