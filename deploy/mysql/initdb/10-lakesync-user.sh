# Sourced, not executed, by the MySQL image entrypoint (keep it non-executable): that is what makes its
# docker_process_sql helper, which runs SQL as root against the init server, available here.
# Runs once, on the first start of an empty datadir (the MySQL image sources /docker-entrypoint-initdb.d/*.sh).
# Creates the least-privilege account lakesync reads and replicates with; the grants are exactly
# lakesync_devkit.dev.mariadb.LAKESYNC_GRANTS (tests/unit/test_docker_compose.py checks that they agree).
# The password comes from the container's environment (.env), never from this file.
: "${LAKESYNC_MYSQL_PASSWORD:?LAKESYNC_MYSQL_PASSWORD must be set (see deploy/env.example)}"
# Backslashes and single quotes are escaped so that any password is the SQL string literal of itself.
password_sql=${LAKESYNC_MYSQL_PASSWORD//\\/\\\\}
password_sql=${password_sql//\'/\'\'}

docker_process_sql --database=mysql <<SQL
CREATE USER IF NOT EXISTS 'lakesync'@'%' IDENTIFIED BY '${password_sql}';
GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'lakesync'@'%';
SQL
