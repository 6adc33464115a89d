"""A steady load of inserts, updates and deletes on the demo database.

``lakesync demo load --rate N --seconds S`` runs it; tests and benchmarks call :func:`run_load`. Each tick
commits a small transaction so the binlog sees realistic, interleaved row changes across tables: new
bookings (and the account balance they move), corrections, reversals (deletes), customer edits, audit rows.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql

from lakesync.core.identifiers import quote_identifier


@dataclass
class LoadReport:
    operations: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.operations.values())

    def summary(self) -> str:
        parts = ", ".join(f"{name} {count}" for name, count in sorted(self.operations.items()))
        rate = self.total / self.seconds if self.seconds else 0.0
        return f"{self.total} changes in {self.seconds:.1f}s ({rate:.0f}/s): {parts}"


class DemoWorkload:
    """One operation at a time against the demo tables, reproducible from ``seed``."""

    def __init__(self, conn: pymysql.connections.Connection, database: str, *, seed: int = 7) -> None:
        self.conn = conn
        self.database = database
        self.random = random.Random(seed)
        with conn.cursor() as cur:
            cur.execute(f"USE {quote_identifier(database)}")
            cur.execute("SELECT account_no FROM accounts")
            self.accounts = [row[0] for row in cur.fetchall()]
            cur.execute("SELECT COALESCE(MAX(id), 0) FROM customers")
            self.max_customer = int(cur.fetchone()[0])
        if not self.accounts:
            raise ValueError(f"database {database!r} has no demo accounts; create it with `lakesync demo init`")

    def step(self, report: LoadReport) -> None:
        roll = self.random.random()
        with self.conn.cursor() as cur:
            if roll < 0.45:
                self._book(cur)
                report.operations["insert"] += 2
            elif roll < 0.70:
                self._correct(cur, report)
            elif roll < 0.80:
                self._reverse(cur, report)
            elif roll < 0.90:
                self._edit_customer(cur)
                report.operations["update"] += 1
            else:
                self._close_day(cur)
                report.operations["upsert"] += 1
        self.conn.commit()

    def _book(self, cur) -> None:
        account = self.random.choice(self.accounts)
        amount = round(self.random.uniform(-500, 500), 2)
        cur.execute(
            "INSERT INTO transactions (account_no, amount, kind, reference, memo, booked_at) "
            "VALUES (%s, %s, %s, %s, %s, NOW(6))",
            (account, amount, self.random.choice(["deposit", "withdrawal", "transfer", "fee"]),
             f"LOAD-{self.random.getrandbits(40):x}", self.random.choice([None, "Miete März", "Gehalt 💶"])),
        )
        cur.execute("UPDATE accounts SET balance = balance + %s WHERE account_no = %s", (amount, account))
        cur.execute(
            "INSERT INTO audit_log (actor, action, details) VALUES ('loadgen', 'book', JSON_OBJECT('account', %s))",
            (account,),
        )

    def _random_transaction(self, cur) -> int | None:
        cur.execute("SELECT MIN(id), MAX(id) FROM transactions")
        low, high = cur.fetchone()
        if low is None:
            return None
        cur.execute("SELECT id FROM transactions WHERE id >= %s ORDER BY id LIMIT 1",
                    (self.random.randint(int(low), int(high)),))
        row = cur.fetchone()
        return int(row[0]) if row else None

    def _correct(self, cur, report: LoadReport) -> None:
        txn = self._random_transaction(cur)
        if txn is None:
            return
        cur.execute("UPDATE transactions SET amount = amount + 0.01, memo = %s WHERE id = %s",
                    (f"corrected {time.time():.0f}", txn))
        report.operations["update"] += 1

    def _reverse(self, cur, report: LoadReport) -> None:
        txn = self._random_transaction(cur)
        if txn is None:
            return
        cur.execute("DELETE FROM transactions WHERE id = %s", (txn,))
        report.operations["delete"] += 1

    def _edit_customer(self, cur) -> None:
        customer = self.random.randint(1, max(1, self.max_customer))
        cur.execute(
            "UPDATE customers SET profile = JSON_SET(COALESCE(profile, '{}'), '$.tier', %s) WHERE id = %s",
            (self.random.randint(0, 9), customer),
        )

    def _close_day(self, cur) -> None:
        account = self.random.choice(self.accounts)
        cur.execute(
            "INSERT INTO daily_balances (account_no, business_date, closing_balance) "
            "SELECT account_no, CURRENT_DATE, balance FROM accounts WHERE account_no = %s "
            "ON DUPLICATE KEY UPDATE closing_balance = VALUES(closing_balance)",
            (account,),
        )


def run_load(conn: pymysql.connections.Connection, database: str, *, rate: float, seconds: float,
             seed: int = 7, on_progress: Callable[[LoadReport], None] | None = None) -> LoadReport:
    """Run operations at ``rate`` per second for ``seconds`` (or until ``rate * seconds`` operations)."""
    workload = DemoWorkload(conn, database, seed=seed)
    report = LoadReport()
    operations = max(1, round(rate * seconds))
    started = time.monotonic()
    for index in range(operations):
        due = started + index / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        workload.step(report)
        if on_progress and index % max(1, int(rate)) == 0:
            report.seconds = time.monotonic() - started
            on_progress(report)
    report.seconds = time.monotonic() - started
    return report
