-- A2 store schema, version 1. Every string of the envelope (session, event
-- ID, type, cause, reducer name) is stored as bytea, its UTF-8 bytes: bytea
-- compares byte for byte, so Sessions pages in byte order whatever the
-- database's collation, and a NUL character (valid UTF-8, refused by text)
-- is kept. Payloads and snapshot states are bytea: kept exactly as given.
-- Read them with convert_from(session, 'UTF8').

CREATE TABLE IF NOT EXISTS sessions (
    session  BYTEA PRIMARY KEY,
    last_idx BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS events (
    session BYTEA NOT NULL,
    idx     BIGINT NOT NULL,
    id      BYTEA NOT NULL,
    type    BYTEA NOT NULL,
    cause   BYTEA NOT NULL,
    time_ms BIGINT NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (session, idx),
    CONSTRAINT events_id_key UNIQUE (id)
);

CREATE TABLE IF NOT EXISTS snapshots (
    session BYTEA NOT NULL,
    reducer BYTEA NOT NULL,
    idx     BIGINT NOT NULL,
    state   BYTEA NOT NULL,
    PRIMARY KEY (session, reducer, idx)
);
