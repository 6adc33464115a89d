"""Which schema events bring a new table to the stream, and when its CREATE TABLE alone rebuilds it (pure)."""

from __future__ import annotations

from lakesync.core.positions import SourcePosition
from lakesync.core.types import ColumnSpec
from lakesync.events.envelope import SchemaChangeEvent
from lakesync.source.ddl import parse_ddl
from lakesync.source.table_reader import TableShape
from lakesync.stream.new_tables import arrivals, created_shape_matches, departed


def ddl_event(sql: str, offset: int, db: str = "shop") -> SchemaChangeEvent:
    """The event the relay publishes for ``sql`` (parsed by the relay's own DDL reader)."""
    change = parse_ddl(sql, default_db=db)[0]
    return SchemaChangeEvent(db=change.db, table=change.table, kind=change.kind, ddl=sql,
                             position=SourcePosition("binlog.000003", offset), ts_ms=0,
                             changes=list(change.changes), new_table=change.new_table)


def shape(*columns: tuple[str, str, str]) -> TableShape:
    specs = tuple(ColumnSpec(name=n, data_type=d, column_type=c, nullable=True) for n, d, c in columns)
    return TableShape("shop", "t", specs, ("id",), 0, 0)


def selects(name: str) -> bool:
    return not name.startswith("staging_")


def test_the_latest_create_of_an_unknown_selected_table_is_its_arrival():
    events = [ddl_event("CREATE TABLE t (id INT PRIMARY KEY)", 100), ddl_event("DROP TABLE t", 200),
              ddl_event("CREATE TABLE t (id INT PRIMARY KEY, v INT)", 300),
              ddl_event("CREATE TABLE staging_x (id INT PRIMARY KEY)", 400),
              ddl_event("CREATE TABLE known (id INT PRIMARY KEY)", 500),
              ddl_event("ALTER TABLE other ADD COLUMN c INT", 600)]
    found = arrivals(events, {"known"}, selects, "shop")
    assert list(found) == ["t"]
    assert found["t"].how == "created" and found["t"].event.position.offset == 300


def test_a_table_renamed_to_a_selected_name_arrives_renamed_in_and_other_databases_do_not_count():
    events = [ddl_event("RENAME TABLE staging_orders TO orders", 100),
              ddl_event("CREATE TABLE elsewhere.t (id INT PRIMARY KEY)", 200)]
    found = arrivals(events, set(), selects, "shop")
    assert list(found) == ["orders"] and found["orders"].how == "renamed_in"


def test_the_source_shape_matches_the_create_only_with_the_same_columns_in_the_same_types():
    create = ddl_event("CREATE TABLE t (id INT NOT NULL PRIMARY KEY, v VARCHAR(20), amount DECIMAL(10,2))", 100)
    same = shape(("id", "int", "int(11)"), ("v", "varchar", "varchar(20)"), ("amount", "decimal", "decimal(10,2)"))
    assert created_shape_matches(create, same)
    added = shape(*same_columns(same), ("extra", "int", "int(11)"))
    assert not created_shape_matches(create, added)
    retyped = shape(("id", "bigint", "bigint(20)"), ("v", "varchar", "varchar(20)"),
                    ("amount", "decimal", "decimal(10,2)"))
    assert not created_shape_matches(create, retyped)
    like = ddl_event("CREATE TABLE t LIKE template", 100)
    assert not created_shape_matches(like, same)


def same_columns(table: TableShape) -> list[tuple[str, str, str]]:
    return [(c.name, c.data_type, c.column_type) for c in table.columns]


def test_a_table_dropped_or_renamed_away_after_its_create_has_departed_and_does_not_arrive():
    events = [ddl_event("CREATE TABLE gone (id INT PRIMARY KEY)", 100), ddl_event("DROP TABLE gone", 200),
              ddl_event("CREATE TABLE moved (id INT PRIMARY KEY)", 300),
              ddl_event("RENAME TABLE moved TO staging_moved", 400),
              ddl_event("CREATE TABLE back (id INT PRIMARY KEY)", 500), ddl_event("DROP TABLE back", 600),
              ddl_event("CREATE TABLE back (id INT PRIMARY KEY)", 700)]
    assert list(arrivals(events, set(), selects, "shop")) == ["back"]
    assert departed(events, "shop") == {"gone", "moved"}, "staging_moved is there (not selected), back came back"
