"""The MySQL/MariaDB side: connections, server checks, schemas, snapshots and the binlog."""
