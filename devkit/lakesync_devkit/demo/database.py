"""Creating and seeding the demo bank database.

Seeding uses MariaDB's SEQUENCE engine (``seq_1_to_N``) so that a million rows are one server-side
``INSERT ... SELECT`` instead of a million round trips; on MySQL it falls back to batched inserts.
"""

from __future__ import annotations

from importlib import resources

import pymysql

from lakesync.core.identifiers import quote_identifier

DEMO_TABLES = ("customers", "accounts", "transactions", "daily_balances", "audit_log")


def schema_statements() -> list[str]:
    text = resources.files("lakesync_devkit.demo").joinpath("schema.sql").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [statement.strip() for statement in body.split(";") if statement.strip()]


def create_demo_database(conn: pymysql.connections.Connection, database: str, *, replace: bool = False) -> None:
    """Create ``database`` with the demo tables (``replace`` drops an existing one first)."""
    with conn.cursor() as cur:
        if replace:
            cur.execute(f"DROP DATABASE IF EXISTS {quote_identifier(database)}")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)} CHARACTER SET utf8mb4")
        cur.execute(f"USE {quote_identifier(database)}")
        cur.execute("SHOW TABLES")
        existing = {row[0] for row in cur.fetchall()}
        for statement in schema_statements():
            table = statement.split("(")[0].split()[-1]
            if table not in existing:
                cur.execute(statement)


def seed_demo_data(conn: pymysql.connections.Connection, database: str, *, customers: int = 200,
                   transactions: int = 2_000) -> None:
    """Customers with one account each, ``transactions`` bookings, and yesterday's balances."""
    with conn.cursor() as cur:
        cur.execute(f"USE {quote_identifier(database)}")
        cur.execute(
            "INSERT INTO customers (full_name, email, segment, profile) "
            "SELECT CONCAT('Kunde ', seq, ' Müller-Łukasz 銀行'), CONCAT('c', seq, '@bank.example'), "
            "ELT(1 + seq % 3, 'retail', 'business', 'private'), "
            "JSON_OBJECT('tier', seq % 5, 'newsletter', seq % 2 = 0) "
            f"FROM seq_1_to_{customers}"
        )
        cur.execute(
            "INSERT INTO accounts (account_no, customer_id, currency, balance, opened_on) "
            "SELECT CONCAT('DE', LPAD(id, 10, '0')), id, ELT(1 + id % 2, 'EUR', 'USD'), 1000.00, "
            "DATE '2024-01-01' + INTERVAL (id % 300) DAY FROM customers"
        )
        seed_transactions(conn, database, rows=transactions, accounts=customers)
        cur.execute(
            "INSERT INTO daily_balances (account_no, business_date, closing_balance) "
            "SELECT account_no, CURRENT_DATE - INTERVAL 1 DAY, balance FROM accounts"
        )


def seed_transactions(conn: pymysql.connections.Connection, database: str, *, rows: int, accounts: int = 200,
                      start_id: int = 1) -> None:
    """``rows`` bookings like the demo's, generated on the server (used by the benchmarks too)."""
    with conn.cursor() as cur:
        cur.execute(f"USE {quote_identifier(database)}")
        done = 0
        while done < rows:
            step = min(500_000, rows - done)
            first = start_id + done
            cur.execute(
                "INSERT INTO transactions (id, account_no, amount, kind, reference, memo, booked_at, updated_at) "
                f"SELECT seq, CONCAT('DE', LPAD(1 + seq % {accounts}, 10, '0')), "
                "ROUND((seq % 100000) / 100 - 500, 2), ELT(1 + seq % 4, 'deposit', 'withdrawal', 'transfer', 'fee'), "
                "CONCAT('REF-', seq), IF(seq % 7 = 0, NULL, CONCAT('Überweisung Nr. ', seq)), "
                "TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq SECOND, "
                "TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq SECOND "
                f"FROM seq_{first}_to_{first + step - 1}"
            )
            done += step
