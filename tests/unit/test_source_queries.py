"""The SQL :mod:`lakesync.source.queries` compiles for source reads: quoting, ``%`` in names, parameters."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pymysql.converters

from lakesync.core.types import ColumnSpec
from lakesync.source import queries

DB, TABLE = "d%b", "fee%s `t` 'q\""
T = "`d%%b`.`fee%%s ``t`` 'q\"`"  # as compiled: backticks doubled, % doubled for PyMySQL's formatting


def _columns(*specs: tuple[str, str]) -> list[ColumnSpec]:
    return [ColumnSpec(name, kind, kind) for name, kind in specs]


def as_pymysql_runs_it(statement) -> str:
    """The text the server gets: PyMySQL's ``query % escaped_args``, which it applies whenever args is not None."""
    sql, params = queries.compile_statement(statement)
    return sql % tuple(pymysql.converters.escape_item(value, "utf8mb4") for value in params)


def test_window_select_quotes_every_name_and_binds_the_bounds():
    columns = _columns(("id %d", "bigint"), ("upd`at", "datetime"), ("ratio", "float"))
    source = queries.source_table(DB, TABLE, [c.name for c in columns])
    low, high = datetime(2026, 11, 19, 1, 59), datetime(2026, 11, 20, 1, 59)
    statement = queries.select_rows(source, columns, queries.in_window(source, "upd`at", low, high))
    sql, params = queries.compile_statement(statement)
    assert " ".join(sql.split()) == (
        f"SELECT {T}.`id %%d`, {T}.`upd``at`, CAST({T}.`ratio` AS DOUBLE) AS as_double_1 FROM {T} "
        f"WHERE {T}.`upd``at` >= %s AND {T}.`upd``at` < %s"
    )
    assert params == (low, high)


def test_percent_in_names_comes_back_single_after_pymysql_formats_the_text():
    columns = _columns(("id %s", "int"))
    source = queries.source_table(DB, TABLE, ["id %s"])
    text = as_pymysql_runs_it(queries.select_rows(source, columns, source.c["id %s"] == 7))
    assert " ".join(text.split()) == ("SELECT `d%b`.`fee%s ``t`` 'q\"`.`id %s` FROM `d%b`.`fee%s ``t`` 'q\"` "
                                      "WHERE `d%b`.`fee%s ``t`` 'q\"`.`id %s` = 7")


def test_statement_without_parameters_still_gets_an_empty_tuple_so_doubled_percents_are_undone():
    ran = []

    class Cursor:
        def execute(self, sql, args=None):
            ran.append((sql, args))

    queries.execute(Cursor(), queries.row_count(DB, TABLE))
    (sql, args), = ran
    assert args == () and sql % args == "SELECT count(*) AS count_1 \nFROM `d%b`.`fee%s ``t`` 'q\"`"


def test_key_list_is_an_expanding_in_of_key_tuples():
    source = queries.source_table(DB, TABLE, ["a", "b"])
    statement = queries.select_rows(source, _columns(("a", "int"), ("b", "varchar")),
                                    queries.key_in(source, ["a", "b"], [[1, "x'"], [2, b"\x00y"]]))
    sql, params = queries.compile_statement(statement)
    assert sql.endswith(f"WHERE ({T}.`a`, {T}.`b`) IN ((%s, %s), (%s, %s))")
    assert params == (1, "x'", 2, b"\x00y")


def test_composite_key_range_is_spelt_out_with_bound_values():
    source = queries.source_table(DB, TABLE, ["a", "b"])
    where = queries.in_key_range(source, ["a", "b"], (1, "m"), (Decimal("5"), "z"))
    sql, params = queries.compile_statement(queries.select_rows(source, _columns(("a", "int")), where))
    a, b = f"{T}.`a`", f"{T}.`b`"
    assert sql.split("WHERE ", 1)[1] == (
        f"({a} > %s OR {a} = %s AND {b} > %s) AND ({a} < %s OR {a} = %s AND {b} <= %s)"
    )
    assert params == (1, 1, "m", Decimal("5"), Decimal("5"), "z")


def test_single_key_range_with_one_open_side_and_the_unbounded_range():
    source = queries.source_table(DB, TABLE, ["id"])
    sql, params = queries.compile_statement(
        queries.select_rows(source, _columns(("id", "int")), queries.in_key_range(source, ["id"], None, (10,))))
    assert sql.endswith(f"WHERE {T}.`id` <= %s") and params == (10,)
    assert queries.in_key_range(source, ["id"], None, None) is None


def test_key_bounds_reads_min_max_and_count():
    sql, params = queries.compile_statement(queries.key_bounds(DB, TABLE, "id"))
    assert " ".join(sql.split()) == (f"SELECT min({T}.`id`) AS min_1, max({T}.`id`) AS max_1, count(*) AS count_1 "
                                     f"FROM {T}")
    assert params == ()


def test_expression_text_gets_its_percent_doubled_like_a_name():
    from sqlalchemy import select

    statement = select(queries.expression("CONCAT_WS('%', `a%b`)")).select_from(queries.source_table(DB, TABLE, []))
    assert as_pymysql_runs_it(statement).startswith("SELECT CONCAT_WS('%', `a%b`)")
