"""The SELECTs lakesync runs on source tables, built with SQLAlchemy Core, run on lakesync's own connection.

What SQLAlchemy does here, and why it is better than SQL text built by hand:

* **Quoting.** Every database, table and column name is quoted (``quoted_name(..., quote=True)``: always, so
  no list of reserved words matters; backticks doubled), by the MySQL dialect's identifier preparer.
* **``%`` in names.** PyMySQL formats a statement run with parameters with Python's ``%`` operator (its
  ``format`` paramstyle), so a ``%`` in a quoted name must be doubled there, and only there. The dialect
  does exactly that; :func:`execute` always passes a parameter tuple (empty if need be), so the doubled
  ``%`` always comes back single. Built by hand, a table named ``fee%s`` broke every settlement read.
* **Values as parameters.** Window bounds, key lists (an expanding ``IN`` of key tuples) and key-range
  bounds are bound parameters, escaped by PyMySQL for the connection's character set, never pasted in.

What it does not do, on purpose:

* **No Engine, no pool.** The reads run on the PyMySQL connection lakesync opened (TLS and secrets from
  :mod:`lakesync.core.connections`) and that carries session state the reads depend on: a consistent snapshot
  (validation, the full load) or ``time_zone = '+00:00'`` (settlement). An Engine wrapped around that
  connection rolls back when it first connects and when its connection closes, even with
  ``isolation_level="AUTOCOMMIT"`` (measured: the snapshot ended and a row committed later became visible),
  and a pooled engine of its own would be a second session outside the snapshot.
* **No result processing.** Columns are untyped, and statements are compiled here and run on a PyMySQL
  cursor (streaming ones on an ``SSCursor``), so rows are PyMySQL's own tuples, value for value what
  :mod:`lakesync.core.types` converts to Arrow (DECIMAL, DATETIME(6), BIT, binary, JSON, YEAR, zero dates).
* **No reflection.** Columns and keys come from ``information_schema`` (:mod:`lakesync.source.schema` says
  why: SQLAlchemy's reflection loses spatial and INET types and column character sets).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    TableClause,
    and_,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
    tuple_,
)
from sqlalchemy.dialects.mysql import pymysql as mysql_pymysql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import quoted_name
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from lakesync.core.types import ColumnSpec

#: PyMySQL's dialect: ``format`` paramstyle, so names' ``%`` are doubled and parameters are ``%s``.
DIALECT = mysql_pymysql.dialect()


class _AsDouble(FunctionElement[float]):
    """``CAST(x AS DOUBLE)``, always: the dialect's own CAST would skip the cast (with a warning) when it
    doesn't know the server's version, and FLOAT would then arrive rounded to 6 digits."""

    name = "as_double"
    inherit_cache = True


@compiles(_AsDouble)
def _compile_as_double(element: _AsDouble, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS DOUBLE)"


def _name(name: str) -> quoted_name:
    return quoted_name(name, quote=True)


def source_table(database: str, name: str, column_names: Sequence[str]) -> TableClause:
    """``database.name`` with ``column_names``, for building statements (no types: no result processing)."""
    return table(_name(name), *(column(_name(c)) for c in column_names), schema=_name(database))


def select_rows(source: TableClause, columns: Sequence[ColumnSpec],
                where: ColumnElement[bool] | None = None) -> Select:
    """Every column of ``source``, in order, read without loss over the text protocol (FLOAT as DOUBLE: the
    server prints FLOAT with 6 significant digits, DOUBLE the stored single-precision value exactly, as the
    binlog has it). ``where`` must be built on the same ``source`` object, or it becomes a second FROM."""
    statement = select(*(_AsDouble(source.c[c.name]) if c.data_type.lower() == "float" else source.c[c.name]
                         for c in columns)).select_from(source)
    return statement if where is None else statement.where(where)


def in_window(source: TableClause, name: str, low: Any, high: Any) -> ColumnElement[bool]:
    """``low <= name < high``: a settlement window."""
    return and_(source.c[name] >= low, source.c[name] < high)


def key_in(source: TableClause, key: Sequence[str], rows: Sequence[Sequence[Any]]) -> ColumnElement[bool]:
    """``(k1, k2) IN ((v1, v2), ...)``: the rows with these keys."""
    return tuple_(*(source.c[name] for name in key)).in_([tuple(row) for row in rows])


def in_key_range(source: TableClause, key: Sequence[str], lower: Sequence[Any] | None,
                 upper: Sequence[Any] | None) -> ColumnElement[bool] | None:
    """``lower < (key) <= upper`` (None: that side open; both None: no predicate), spelt out as
    ``(a > x) OR (a = x AND b > y)``, because not every server uses an index for row-constructor comparisons."""
    parts = [_tuple_compare(source, key, bound, strict_op, last_op)
             for bound, strict_op, last_op in ((lower, operator.gt, operator.gt), (upper, operator.lt, operator.le))
             if bound is not None]
    return and_(*parts) if parts else None


_Compare = Callable[[Any, Any], Any]


def _tuple_compare(source: TableClause, key: Sequence[str], values: Sequence[Any], strict_op: _Compare,
                   last_op: _Compare) -> ColumnElement[bool]:
    clauses = []
    for i, name in enumerate(key):
        equal = [source.c[c] == v for c, v in zip(key[:i], values[:i], strict=True)]
        op = last_op if i == len(key) - 1 else strict_op
        clauses.append(and_(*equal, op(source.c[name], values[i])))
    return or_(*clauses)


def key_bounds(database: str, name: str, key: str) -> Select:
    """``MIN(key), MAX(key), COUNT(*)``: to cut an integer key into ranges."""
    source = source_table(database, name, [key])
    return select(func.min(source.c[key]), func.max(source.c[key]), func.count()).select_from(source)


def row_count(database: str, name: str) -> Select:
    return select(func.count()).select_from(source_table(database, name, []))


def expression(sql: str) -> ColumnElement[Any]:
    """A SELECT-list expression given as SQL text (names in it already quoted by
    :func:`lakesync.core.identifiers.quote_identifier`); its ``%`` are doubled like a name's when compiled."""
    return literal_column(sql)


def compile_statement(statement: Select) -> tuple[str, tuple[Any, ...]]:
    """The SQL text for PyMySQL and its parameters, in order (expanding ``IN`` lists rendered out)."""
    compiled = statement.compile(dialect=DIALECT, compile_kwargs={"render_postcompile": True})
    params = compiled.construct_params()
    return str(compiled), tuple(params[name] for name in compiled.positiontup or ())


def execute(cursor: Any, statement: Select) -> None:
    """Run ``statement`` on a PyMySQL ``cursor``; fetch from the cursor as usual.

    The parameters go as a tuple even when empty: PyMySQL formats the text only when it gets parameters,
    and the compiled text has every ``%`` of a name doubled for that formatting."""
    sql, params = compile_statement(statement)
    cursor.execute(sql, params)


def one_row(cursor: Any) -> tuple[Any, ...]:
    """The row a query that always returns one (an aggregate, ``SELECT @@variable``) returned."""
    row = cursor.fetchone()
    assert row is not None, "this query returns one row"
    return tuple(row)
