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
_ALTER_HEAD = re.compile(
    rf"^(\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}"
    rf"(?:\s+(?:WAIT\s+\d+|NOWAIT))?)\s*(.*)$", re.IGNORECASE | re.DOTALL)
#: ALTER TABLE actions that keep every column's name, type and value (indexes, rebuilds, storage and table
#: options, partitioning that moves rows without changing them, a text character set change): dropped before
#: sqlglot reads the rest, because it cannot read most of them and none of them matters to Delta.
_HARMLESS_ACTION = re.compile(
    r"^(RENAME\s+(INDEX|KEY)\b|FORCE$|ENGINE\b|ROW_FORMAT\b|AUTO_INCREMENT\b|ALGORITHM\b|LOCK\b|"
    r"KEY_BLOCK_SIZE\b|STATS_\w+|CHECKSUM\b|PAGE_CHECKSUM\b|PACK_KEYS\b|MAX_ROWS\b|MIN_ROWS\b|"
    r"AVG_ROW_LENGTH\b|COMPRESSION\b|ENCRYPTION\b|TRANSACTIONAL\b|COMMENT\b|"
    r"(DEFAULT\s+)?(CHARACTER\s+SET|CHARSET|COLLATE)\b|"
    r"CONVERT\s+TO\s+(CHARACTER\s+SET|CHARSET)\s+(?!['\"`]?binary\b)|"
    r"(ENABLE|DISABLE)\s+KEYS\b|ALTER\s+(INDEX|KEY)\b|"
    r"(ADD|COALESCE|REORGANIZE|ANALYZE|CHECK|OPTIMIZE|REBUILD|REPAIR)\s+PARTITION\b|"
    r"PARTITION\s+BY\b|REMOVE\s+PARTITIONING\b|ORDER\s+BY\b|(IMPORT|DISCARD)\s+TABLESPACE\b|"
    r"(WITH|WITHOUT)\s+VALIDATION\b|ADD\s+(INDEX|KEY|FULLTEXT|SPATIAL|UNIQUE)\b|"
    r"DROP\s+(INDEX|KEY|FOREIGN\s+KEY|CHECK|CONSTRAINT)\b)",
    re.IGNORECASE,
)
#: Actions that remove or swap rows without row events: Delta cannot follow them, the table must be re-loaded.
_ROWS_CHANGED_ACTION = re.compile(
    r"^((DROP|TRUNCATE|EXCHANGE)\s+PARTITION\b|CONVERT\s+(PARTITION|TABLE)\b|"
    r"CONVERT\s+TO\s+(CHARACTER\s+SET|CHARSET)\s+['\"`]?binary\b)",
    re.IGNORECASE,
)
#: MariaDB column types sqlglot cannot read, and a type it reads that maps to the same Delta type.
_UNREAD_TYPES = re.compile(
    r"(?<![\w`])(INET6|INET4)(?=\s*(?:[,)]|$|\s+(?:NOT|NULL|DEFAULT|COMMENT|AFTER|FIRST|PRIMARY|UNIQUE|KEY|"
    r"CHARACTER|CHARSET|COLLATE|INVISIBLE|CHECK|REFERENCES)\b))",
    re.IGNORECASE,
)
_STAND_INS = {"inet6": "VARCHAR(39)", "inet4": "VARCHAR(15)"}

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
    """Name and type; ``not_null``, ``default`` and ``if_not_exists`` only when the definition has them.

    ``default`` is ``{"value": text}`` for a literal (numbers as written, strings unquoted) or
    ``{"expression": sql}`` for anything else (``CURRENT_TIMESTAMP``): MySQL fills the rows that exist when
    a column is added with its default, so the stream must know it.
    """
    kind = column.args.get("kind")
    out: dict[str, Any] = {"column": column.name, "type": kind.sql("mysql") if kind is not None else None}
    if column.args.get("exists"):  # MariaDB's ADD COLUMN IF NOT EXISTS: a no-op where the column exists
        out["if_not_exists"] = True
    for constraint in column.args.get("constraints") or []:
        detail = constraint.args.get("kind")
        if isinstance(detail, exp.NotNullColumnConstraint) and not detail.args.get("allow_null"):
            out["not_null"] = True
        elif isinstance(detail, exp.DefaultColumnConstraint):
            value = detail.this
            negative = isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal)
            if negative:
                out["default"] = {"value": "-" + value.this.name}
            elif isinstance(value, exp.Literal):
                out["default"] = {"value": value.name}
            elif not isinstance(value, exp.Null):
                out["default"] = {"expression": value.sql("mysql")}
    return out


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


def _split_actions(body: str) -> list[str]:
    """The comma-separated actions of an ALTER TABLE, commas inside parentheses or quotes left alone."""
    actions, depth, quote, start = [], 0, "", 0
    for index, char in enumerate(body):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            actions.append(body[start:index].strip())
            start = index + 1
    actions.append(body[start:].strip())
    return [action for action in actions if action]


def _without_harmless_actions(text: str, default_db: str) -> str | list[DdlChange]:
    """An ALTER TABLE without the actions that change no column; the result when nothing else is left."""
    match = _ALTER_HEAD.match(text)
    if not match:
        return text
    head, body = match.group(1), match.group(4)
    db, table = _split(match.group(2), match.group(3), default_db)
    actions = _split_actions(body)
    for action in actions:
        if _ROWS_CHANGED_ACTION.match(action):
            return [DdlChange(UNKNOWN, db, table, reason=f"{action!r} changes rows or column types in ways no row event shows")]
    kept = [action for action in actions if not _HARMLESS_ACTION.match(action)]
    if not kept:
        return [DdlChange(ALTER_TABLE, db, table)]
    return f"{head} {', '.join(kept)}" if len(kept) < len(actions) else text


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
    text = _UNREAD_TYPES.sub(lambda m: _STAND_INS[m.group(1).lower()], text)
    reduced = _without_harmless_actions(text, default_db)
    if isinstance(reduced, list):
        return reduced
    text = reduced
    try:
        statement = sqlglot.parse_one(text, read="mysql")
    except sqlglot.errors.SqlglotError as exc:
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
