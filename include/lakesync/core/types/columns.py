"""One source column as lakesync sees it: the catalog's (or the binlog's) name and type."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TYPE_ARGS = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_QUOTED_VALUE = re.compile(r"'((?:[^'\\]|''|\\.)*)'")


@dataclass(frozen=True)
class ColumnSpec:
    """One source column.

    ``data_type`` is ``information_schema.COLUMNS.DATA_TYPE`` in lower case (``int``, ``decimal``,
    ``varchar``, ``enum``...); ``column_type`` is the full ``COLUMN_TYPE`` (``int(10) unsigned``,
    ``decimal(65,30)``, ``enum('a','b')``, ``datetime(6)``). ``enum_values`` holds the allowed values of an
    ENUM or SET in definition order (parsed from ``column_type`` when left empty).
    """

    name: str
    data_type: str
    column_type: str
    nullable: bool = True
    charset: str | None = None
    enum_values: tuple[str, ...] = field(default=())

    @property
    def unsigned(self) -> bool:
        return " unsigned" in self.column_type.lower()

    @property
    def type_args(self) -> tuple[int, ...]:
        """The numbers in the type's parentheses: ``decimal(65,30)`` -> ``(65, 30)``, ``bit(1)`` -> ``(1,)``."""
        match = _TYPE_ARGS.search(self.column_type)
        if not match:
            return ()
        return tuple(int(group) for group in match.groups() if group is not None)

    @property
    def allowed_values(self) -> tuple[str, ...]:
        """The ENUM/SET members in definition order."""
        if self.enum_values:
            return self.enum_values
        body = self.column_type[self.column_type.find("(") + 1 : self.column_type.rfind(")")]
        return tuple(_unquote(raw) for raw in _QUOTED_VALUE.findall(body))


def _unquote(raw: str) -> str:
    return raw.replace("''", "'").replace("\\\\", "\\")
