"""Understanding DDL statements from the binlog (``QueryEvent``), with sqlglot's MySQL dialect.

The relay does not need DDL to decode rows (the table-map events carry each table's columns as of that
row), but it must tell the sink when a selected table's shape changed, and it must stop, clearly, when a
statement touches a selected table and cannot be understood: guessing would put wrong data in Delta.
:func:`parse_ddl` is pure, so every statement form is unit-tested without a server.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

CREATE_TABLE, DROP_TABLE, RENAME_TABLE, TRUNCATE, ALTER_TABLE, DROP_DATABASE, UNKNOWN = (
    "create_table", "drop_table", "rename_table", "truncate", "alter_table", "drop_database", "unknown",
)
CHANGE_KINDS = (CREATE_TABLE, DROP_TABLE, RENAME_TABLE, TRUNCATE, ALTER_TABLE, DROP_DATABASE)

#: Statements that never change a table's columns or existence: skipped without parsing.
_IGNORED_PREFIX = re.compile(
    r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|XA\s|GRANT|REVOKE|CREATE\s+USER|ALTER\s+USER|DROP\s+USER|RENAME\s+USER|"
    r"SET\s|FLUSH|ANALYZE|OPTIMIZE|CREATE\s+(DATABASE|SCHEMA)|ALTER\s+(DATABASE|SCHEMA)|"
    r"CREATE\s+(OR\s+REPLACE\s+)?(ALGORITHM\s*=\s*\w+\s+)?(DEFINER\s*=\s*\S+\s+)?(SQL\s+SECURITY\s+\w+\s+)?"
    r"(VIEW|TRIGGER|PROCEDURE|FUNCTION|EVENT)|DROP\s+(VIEW|TRIGGER|PROCEDURE|FUNCTION|EVENT)|"
    r"(CREATE|DROP)\s+(UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX|INSTALL|UNINSTALL|CREATE\s+SEQUENCE|# Dummy)",
    re.IGNORECASE,
)
_COMMENT = re.compile(r"/\*.*?\*/|^\s*#[^\n]*$|--[^\n]*$", re.DOTALL | re.MULTILINE)
_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QUALIFIED = rf"({_NAME})(?:\s*\.\s*({_NAME}))?"
_RENAME_TABLE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.+)$", re.IGNORECASE | re.DOTALL)
_RENAME_PAIR = re.compile(rf"^\s*{_QUALIFIED}\s+TO\s+{_QUALIFIED}\s*$", re.IGNORECASE)
_TABLE_OF = re.compile(
    rf"^\s*(?:ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE"
    rf"(?:\s+IF\s+NOT\s+EXISTS)?|DROP\s+(?:TEMPORARY\s+)?TABLES?(?:\s+IF\s+EXISTS)?|TRUNCATE(?:\s+TABLE)?)\s+"
    rf"{_QUALIFIED}",
    re.IGNORECASE,
)
_DROP_DATABASE = re.compile(rf"^\s*DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?({_NAME})", re.IGNORECASE)

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # it warns on every statement it falls back on


@dataclass(frozen=True)
class DdlChange:
    """What one DDL statement did to one table.

    ``changes`` lists column edits for ``alter_table`` and the columns of ``create_table``:
    ``{"change": "add"|"drop"|"modify"|"rename", "column": name, "type": SQL type, "new_column": name}``.
    ``reason`` says why a statement is ``unknown``.
    """

    kind: str
    db: str
    table: str
    changes: tuple[dict[str, Any], ...] = field(default=())
    new_db: str | None = None
    new_table: str | None = None
    reason: str = ""


def _unquote(name: str | None) -> str | None:
    if name is None:
        return None
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _split(first: str, second: str | None, default_db: str) -> tuple[str, str]:
    """``db.table`` or ``table`` (in the statement's default database)."""
    if second is None:
        return default_db, _unquote(first) or ""
    return _unquote(first) or default_db, _unquote(second) or ""


def _table_name(table: exp.Table, default_db: str) -> tuple[str, str]:
    return table.db or default_db, table.name


def _column_def(column: exp.ColumnDef) -> dict[str, Any]:
    kind = column.args.get("kind")
    return {"column": column.name, "type": kind.sql("mysql") if kind is not None else None}


def _alter_changes(actions: list[exp.Expression]) -> tuple[list[dict[str, Any]], str | None]:
    """Column edits of an ALTER TABLE, and the reason when an action can't be understood."""
    changes: list[dict[str, Any]] = []
    for action in actions:
        if isinstance(action, exp.ColumnDef):
            changes.append({"change": "add", **_column_def(action)})
        elif isinstance(action, exp.Drop) and str(action.args.get("kind", "")).upper() == "COLUMN":
            changes.extend({"change": "drop", "column": col.name} for col in action.args.get("tables") or [])
        elif isinstance(action, exp.ModifyColumn):
            definition = _column_def(action.this)
            rename_from = action.args.get("rename_from")
            if rename_from is not None and rename_from.name != definition["column"]:
                changes.append({"change": "rename", "column": rename_from.name, "new_column": definition["column"]})
            changes.append({"change": "modify", **definition})
        elif isinstance(action, exp.RenameColumn):
            changes.append({"change": "rename", "column": action.this.name, "new_column": action.args["to"].name})
        elif isinstance(action, exp.DropPrimaryKey) or (
                isinstance(action, exp.AddConstraint) and action.find(exp.PrimaryKey) is not None):
            # The sink merges by the key: a new key changes which rows are "the same row".
            changes.append({"change": "primary_key"})
        elif isinstance(action, exp.Drop | exp.AddConstraint | exp.AlterColumn):
            continue  # indexes, unique keys, defaults: rows keep their shape
        else:
            return changes, f"cannot interpret the ALTER TABLE action {action.sql('mysql')!r}"
    return changes, None


def _create_columns(create: exp.Create) -> list[dict[str, Any]]:
    schema = create.this
    if not isinstance(schema, exp.Schema):
        return []
    return [{"change": "add", **_column_def(col)} for col in schema.expressions if isinstance(col, exp.ColumnDef)]


def _fallback(sql: str, default_db: str, reason: str) -> list[DdlChange]:
    """An unparsed statement: name the table it targets when we can, so the caller can decide."""
    match = _TABLE_OF.match(sql)
    if not match:
        return [DdlChange(UNKNOWN, default_db, "", reason=reason)]
    db, table = _split(match.group(1), match.group(2), default_db)
    return [DdlChange(UNKNOWN, db, table, reason=reason)]


def _rename_tables(body: str, default_db: str) -> list[DdlChange] | None:
    out = []
    for pair in re.split(r",(?=(?:[^`]*`[^`]*`)*[^`]*$)", body):
        match = _RENAME_PAIR.match(pair)
        if not match:
            return None
        db, table = _split(match.group(1), match.group(2), default_db)
        new_db, new_table = _split(match.group(3), match.group(4), default_db)
        out.append(DdlChange(RENAME_TABLE, db, table, new_db=new_db, new_table=new_table))
    return out


def parse_ddl(sql: str, *, default_db: str) -> list[DdlChange]:
    """The table-level effects of one statement; ``[]`` when it changes no table's rows or columns.

    A statement that targets a table but can't be understood yields an ``unknown`` change naming the
    table (when the name can be found) and the reason; the caller decides whether it matters.
    """
    text = _COMMENT.sub(" ", sql).strip().rstrip(";")
    if not text or _IGNORED_PREFIX.match(text):
        return []
    if match := _DROP_DATABASE.match(text):
        return [DdlChange(DROP_DATABASE, _unquote(match.group(1)) or "", "")]
    if match := _RENAME_TABLE.match(text):
        renamed = _rename_tables(match.group(1), default_db)
        return renamed if renamed is not None else _fallback(text, default_db, "cannot read RENAME TABLE")
    try:
        statement = sqlglot.parse_one(text, read="mysql")
    except sqlglot.errors.ParseError as exc:
        return _fallback(text, default_db, f"sqlglot cannot parse it: {str(exc).splitlines()[0]}")
    if isinstance(statement, exp.Alter) and str(statement.args.get("kind", "")).upper() == "TABLE":
        db, table = _table_name(statement.this, default_db)
        actions = list(statement.args.get("actions") or [])
        renames = [a for a in actions if isinstance(a, exp.AlterRename)]
        changes, problem = _alter_changes([a for a in actions if not isinstance(a, exp.AlterRename)])
        if problem:
            return [DdlChange(UNKNOWN, db, table, reason=problem)]
        out = [DdlChange(ALTER_TABLE, db, table, tuple(changes))] if changes or not renames else []
        for rename in renames:
            new_db, new_table = _table_name(rename.this, db)
            out.append(DdlChange(RENAME_TABLE, db, table, new_db=new_db, new_table=new_table))
        return out
    if isinstance(statement, exp.Create) and str(statement.args.get("kind", "")).upper() == "TABLE":
        target = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this
        db, table = _table_name(target, default_db)
        return [DdlChange(CREATE_TABLE, db, table, tuple(_create_columns(statement)))]
    if isinstance(statement, exp.Drop) and str(statement.args.get("kind", "")).upper() == "TABLE":
        return [DdlChange(DROP_TABLE, *_table_name(t, default_db)) for t in statement.args.get("tables")
                or [statement.this]]
    if isinstance(statement, exp.TruncateTable):
        return [DdlChange(TRUNCATE, *_table_name(t, default_db)) for t in statement.expressions]
    if isinstance(statement, exp.Command | exp.Alter | exp.Create | exp.Drop):
        return _fallback(text, default_db, "sqlglot does not understand this statement form")
    return []
