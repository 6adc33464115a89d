"""lakesync: keep Delta Lake tables in step with MySQL and MariaDB.

The library is small at the top and deep underneath: pipelines are described by YAML files
(:mod:`lakesync.core.config`), every change carries a :class:`lakesync.core.positions.SourcePosition`, and the
Delta sink applies a change only when its position is newer than the one stored for its key.
"""

__version__ = "0.1.0"
