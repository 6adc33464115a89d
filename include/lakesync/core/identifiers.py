"""MySQL identifiers in SQL text written by hand: lakesync's one quoting rule for names in SQL *expressions*.

Names are quoted always, not only when they need it, so no list of reserved words has to be kept. Whole
statements on source tables are built by :mod:`lakesync.source.queries` (SQLAlchemy Core), which applies the
same rule and doubles a name's ``%`` for PyMySQL's parameter formatting; text from here that goes into such a
statement (the full load's row expressions) must go through :func:`lakesync.source.queries.expression`, which
doubles it too. Statements run without parameters (``USE``, ``GRANT``) may use this rule alone.
"""

from __future__ import annotations


def quote_identifier(name: str) -> str:
    """``name`` in backticks with embedded backticks doubled (MySQL's only escape inside a quoted name),
    so any name, however hostile, is just a name."""
    return "`" + name.replace("`", "``") + "`"
