-- The demo source: a small bank with a day-end settlement flavour.
-- Several key types (integer, CHAR, composite, BIGINT UNSIGNED), a table without a primary key,
-- DECIMAL money, DATETIME(6), JSON, ENUM and utf8mb4 text.
CREATE TABLE customers (
    id          INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    full_name   VARCHAR(200) NOT NULL,
    email       VARCHAR(255) NOT NULL UNIQUE,
    segment     ENUM('retail', 'business', 'private') NOT NULL DEFAULT 'retail',
    profile     JSON NULL,
    created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE accounts (
    account_no  CHAR(12) NOT NULL PRIMARY KEY,
    customer_id INT UNSIGNED NOT NULL,
    currency    CHAR(3) NOT NULL DEFAULT 'EUR',
    balance     DECIMAL(18, 2) NOT NULL DEFAULT 0,
    status      ENUM('open', 'frozen', 'closed') NOT NULL DEFAULT 'open',
    opened_on   DATE NOT NULL,
    updated_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    KEY (customer_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE transactions (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account_no  CHAR(12) NOT NULL,
    amount      DECIMAL(18, 2) NOT NULL,
    kind        ENUM('deposit', 'withdrawal', 'transfer', 'fee') NOT NULL,
    reference   VARCHAR(64) NOT NULL,
    memo        TEXT NULL,
    booked_at   DATETIME(6) NOT NULL,
    updated_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    KEY (account_no),
    KEY (updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE daily_balances (
    account_no      CHAR(12) NOT NULL,
    business_date   DATE NOT NULL,
    closing_balance DECIMAL(18, 2) NOT NULL,
    updated_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (account_no, business_date)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE audit_log (
    logged_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    actor       VARCHAR(64) NOT NULL,
    action      VARCHAR(32) NOT NULL,
    details     JSON NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
