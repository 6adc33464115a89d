"""PostgreSQL from Debian's packages as the production shape's Airflow metadata database.

PostgreSQL refuses to run as root, so when we are root its commands run as the ``postgres`` system user
(created by the Debian package) through ``runuser``, and its folder belongs to that user. It listens on
loopback only, with password (scram) authentication for TCP and its socket inside its own folder.
"""

from __future__ import annotations

import glob
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lakesync.core.errors import StackError
from lakesync_devkit.dev.processes import LocalServer, ensure_port_free, port_is_open, wait_until

OS_USER = "postgres"
SUPERUSER = "postgres"


def postgres_bin_dir() -> Path:
    """``/usr/lib/postgresql/<newest>/bin`` (``$LAKESYNC_PG_BIN`` overrides)."""
    explicit = os.environ.get("LAKESYNC_PG_BIN")
    found = [explicit] if explicit else sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                                key=lambda p: int(Path(p).parent.name))
    if not found or not (Path(found[-1]) / "pg_ctl").exists():
        raise StackError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl)",
                         hint="apt-get install -y postgresql (scripts/setup.sh does it)")
    return Path(found[-1])


@dataclass
class PostgresServer(LocalServer):
    password: str = ""
    name: ClassVar[str] = "postgres"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(postgres_bin_dir() / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", OS_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if check and done.returncode != 0:
            raise StackError(f"PostgreSQL's {argv[0]} failed: {done.stderr.strip()[-1500:]}",
                             hint=f"see {self.log_file}")
        return done

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _let_postgres_reach_home(self) -> None:
        """As root, give the ``postgres`` user passage (o+x, not read) through folders it could not enter, such
        as pytest's private temporary folders; its own folder is then handed to it."""
        for folder in reversed(self.home.parents):
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
        shutil.chown(self.home, OS_USER, OS_USER)

    def _initialise(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        password_file = self.home / "pwfile"
        password_file.write_text(self.password + "\n")
        if os.geteuid() == 0:
            self._let_postgres_reach_home()
            shutil.chown(password_file, OS_USER, OS_USER)
        password_file.chmod(0o600)
        try:
            self._run("initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--pwfile", str(password_file),
                      "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--locale=C.UTF-8")
        finally:
            password_file.unlink(missing_ok=True)

    def start(self, *, timeout: float = 60.0) -> None:
        if self.is_running():
            return
        ensure_port_free(self.host, self.port, "PostgreSQL")
        if not (self.data_dir / "PG_VERSION").exists():
            self._initialise()
        options = f"-p {self.port} -c listen_addresses={self.host} -k {self.home}"
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-o", options, "-w", "start")
        wait_until(lambda: port_is_open(self.host, self.port), timeout=timeout, what="PostgreSQL",
                   log_file=self.log_file)

    def stop(self) -> None:
        if self.pid():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop", check=False)

    def uri(self, database: str, user: str, password: str, *, driver: str = "postgresql+psycopg2") -> str:
        from urllib.parse import quote

        return f"{driver}://{quote(user)}:{quote(password, safe='')}@{self.host}:{self.port}/{database}"

    def ensure_database(self, database: str, user: str, password: str) -> None:
        """Create ``user`` (owner) and ``database`` unless they exist; the password is (re)set each time."""
        import psycopg2
        from psycopg2 import sql

        conn = psycopg2.connect(host=self.host, port=self.port, user=SUPERUSER, password=self.password,
                                dbname="postgres")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
                verb = "ALTER" if cur.fetchone() else "CREATE"
                cur.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD %s").format(sql.Identifier(user)), (password,))
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
                if not cur.fetchone():
                    cur.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database),
                                                                               sql.Identifier(user)))
        finally:
            conn.close()
