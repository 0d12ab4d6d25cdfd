-- A2 store schema, version 2: the index of sessions that may have work
-- (persistence.WorkIndexer). has_work is set or cleared in the transaction
-- of the append that changes it; the partial index lists the sessions with
-- work without reading the others. store_flags records that the index
-- covers every session: at once for a store with no session yet, after a
-- full scan (MarkWorkIndexComplete) for one written before this version.

ALTER TABLE sessions ADD COLUMN IF NOT EXISTS has_work BOOLEAN NOT NULL DEFAULT FALSE;

CREATE INDEX IF NOT EXISTS sessions_with_work ON sessions (session) WHERE has_work;

CREATE TABLE IF NOT EXISTS store_flags (
    name TEXT PRIMARY KEY
);

INSERT INTO store_flags (name)
    SELECT 'work-index-complete' WHERE NOT EXISTS (SELECT 1 FROM sessions)
    ON CONFLICT (name) DO NOTHING;
