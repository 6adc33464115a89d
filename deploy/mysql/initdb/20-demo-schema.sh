# Sourced, not executed, by the MySQL image entrypoint (keep it non-executable): that is what makes its
# docker_process_sql helper, which runs SQL as root against the init server, available here.
# Runs once, on the first start of an empty datadir: the demo bank schema (devkit/lakesync_devkit/demo/schema.sql,
# mounted read-only) in the database deploy/pipelines/team.yaml reads, so that the DAGs have tables to load.
# Point the pipeline at your own database instead by setting LAKESYNC_SOURCE_DATABASE in .env.
database=${LAKESYNC_SOURCE_DATABASE:-bank}
docker_process_sql --database=mysql <<SQL
CREATE DATABASE IF NOT EXISTS \`${database}\` CHARACTER SET utf8mb4;
SQL
if [[ "${database}" == "bank" ]]; then
    docker_process_sql --database=bank < /opt/lakesync/demo/schema.sql
fi
