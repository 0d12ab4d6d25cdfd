-- A2 store schema, version 3: session leases (persistence.Leaser). epoch
-- only grows: each acquisition raises it, a release only ends the expiry.
-- A fenced append reads its session's row FOR SHARE in the append's
-- transaction, so an acquisition waits for the appends of the epoch before.

CREATE TABLE IF NOT EXISTS leases (
    session    BYTEA PRIMARY KEY,
    owner      TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
