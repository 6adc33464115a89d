"""The embedded MariaDB server: Debian's ``mariadb-server`` on loopback with its own datadir.

It is set up the way lakesync needs a production source to be: row-based binlog with full row images and
full row metadata, a unique ``server_id``, GTIDs (always on in MariaDB), and a least-privilege ``lakesync``
user. Passwords are generated per stack and kept in the state folder (mode 0600), never in the repo.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pymysql

from lakesync.core.errors import StackError
from lakesync_devkit.dev.processes import LocalServer, ensure_port_free, spawn, stop_pid, wait_until

#: What the lakesync user may do, and why (docs/security.md has the same list).
LAKESYNC_GRANTS = (
    "SELECT",  # read tables for the full load, settlement syncs and validation
    "RELOAD",  # FLUSH TABLES WITH READ LOCK where a lock-based snapshot is needed (MySQL 8)
    "REPLICATION SLAVE",  # read the binlog (the relay)
    "REPLICATION CLIENT",  # SHOW MASTER STATUS / SHOW BINARY LOGS for positions and purge checks
)

INSTALL_HINT = "install it with: sudo apt-get install -y mariadb-server mariadb-client"


def _binary(*names: str) -> str:
    for name in names:
        for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
            if candidate and Path(candidate).exists():
                return candidate
    raise StackError(f"the MariaDB server program ({names[0]}) is not installed", hint=INSTALL_HINT)


@dataclass
class MariaDBServer(LocalServer):
    """One embedded server: where it keeps its files and where it listens."""

    server_id: int = 1
    root_password: str = ""
    name: ClassVar[str] = "mariadb"

    @property
    def datadir(self) -> Path:
        return self.home / "data"

    @property
    def tmpdir(self) -> Path:
        return self.home / "tmp"

    @property
    def socket(self) -> Path:
        return self.home / "mariadb.sock"

    def server_args(self) -> list[str]:
        return [
            _binary("mariadbd", "mysqld"),
            "--no-defaults",
            "--user=root",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            # Its own temp folder: servers sharing /tmp delete each other's temporary tables at start-up.
            f"--tmpdir={self.tmpdir}",
            f"--pid-file={self.pid_file}",
            f"--bind-address={self.host}",
            f"--port={self.port}",
            f"--server-id={self.server_id}",
            f"--log-bin={self.datadir / 'binlog'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            "--log-slave-updates",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
            "--default-time-zone=+00:00",
            "--innodb-buffer-pool-size=256M",
            "--innodb-log-file-size=256M",
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--max-allowed-packet=256M",
            "--max-connections=300",
            "--skip-log-error",
        ]

    def initialise(self) -> None:
        """Create the datadir with the system tables (first start only)."""
        if (self.datadir / "mysql").exists():
            return
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                _binary("mariadb-install-db", "mysql_install_db"),
                "--no-defaults",
                "--user=root",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",  # passed to the bootstrap server: two installs sharing /tmp collide
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(
                f"mariadb-install-db failed (exit {result.returncode}): {result.stderr.strip()[-800:]}",
                hint=f"remove {self.datadir} and try again; {INSTALL_HINT}",
            )

    def start(self, *, timeout: float = 60.0) -> None:
        """Start the server if it is not running; harmless when it already is."""
        if self.is_running():
            return
        ensure_port_free(self.host, self.port, "MariaDB")
        self.initialise()
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        spawn(self.server_args(), log_file=self.log_file)
        wait_until(self._accepts_root, timeout=timeout, what="MariaDB", log_file=self.log_file)
        self._secure_root()

    def _accepts_root(self) -> bool:
        for password in {self.root_password, ""}:
            try:
                pymysql.connect(
                    host=self.host, port=self.port, user="root", password=password, connect_timeout=1,
                    ssl_disabled=True,
                ).close()
                return True
            except pymysql.MySQLError:
                continue
        return False

    def _secure_root(self) -> None:
        """A fresh datadir has a root with no password: give it the stack's password."""
        if not self.root_password:
            return
        try:
            conn = pymysql.connect(host=self.host, port=self.port, user="root", password="", autocommit=True,
                                   ssl_disabled=True)
        except pymysql.MySQLError:
            return  # already secured
        with conn, conn.cursor() as cur:
            cur.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (self.root_password,))
            cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY %s", (self.root_password,))
            cur.execute("ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY %s", (self.root_password,))
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")

    def stop(self) -> None:
        stop_pid(self.pid(), timeout=60)

    def connect(self, database: str | None = None, **kwargs: object) -> pymysql.connections.Connection:
        """A root connection (admin work: schemas, grants, test setup). Without TLS: the embedded server
        listens on loopback only, and PyMySQL's default would build a TLS context per connection (about 45 ms
        of CPU, loading the CA store) that the tests' many connections would pay for nothing."""
        options: dict[str, object] = {
            "ssl_disabled": True,
            "host": self.host,
            "port": self.port,
            "user": "root",
            "password": self.root_password,
            "database": database,
            "autocommit": True,
            "charset": "utf8mb4",
        }
        options.update(kwargs)
        return pymysql.connect(**options)  # type: ignore[arg-type]

    def create_lakesync_user(self, user: str, password: str) -> None:
        """The least-privilege user the relay and loader run as (read-only plus replication rights).

        SELECT is granted globally so that schemas created later are readable without re-granting; the
        load generator writes as root, never as this user."""
        self.create_user(user, password, LAKESYNC_GRANTS)

    def create_user(self, user: str, password: str, grants: tuple[str, ...]) -> None:
        """``user`` with ``password`` and the global ``grants`` (a new password replaces the old), from both
        loopback host names, as clients connect by socket or by TCP."""
        with self.connect() as conn, conn.cursor() as cur:
            for host in ("localhost", "127.0.0.1"):
                cur.execute(f"CREATE USER IF NOT EXISTS '{user}'@'{host}' IDENTIFIED BY %s", (password,))
                cur.execute(f"ALTER USER '{user}'@'{host}' IDENTIFIED BY %s", (password,))
                cur.execute(f"GRANT {', '.join(grants)} ON *.* TO '{user}'@'{host}'")
