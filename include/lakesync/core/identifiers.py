"""MySQL identifiers in SQL text: lakesync's one quoting rule for database, table and column names.

Names are quoted always, not only when they need it, so no list of reserved words has to be kept.
(SQLAlchemy's MySQL identifier preparer applies the same rule but also doubles ``%`` when its dialect uses
a ``format`` paramstyle, which is right only for SQL later run with parameters; names here go into both
kinds, so the rule is kept here, plain.) A ``%`` in a name therefore stays single: SQL that holds quoted
names and is run with parameters (PyMySQL formats it with ``%``) must not be built from this alone.
"""

from __future__ import annotations


def quote_identifier(name: str) -> str:
    """``name`` in backticks with embedded backticks doubled (MySQL's only escape inside a quoted name),
    so any name, however hostile, is just a name."""
    return "`" + name.replace("`", "``") + "`"


def qualified_name(database: str, table: str) -> str:
    """```database`.`table``` for SQL text."""
    return f"{quote_identifier(database)}.{quote_identifier(table)}"
