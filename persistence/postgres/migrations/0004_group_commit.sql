-- A2 store schema, version 4: group commit and member leases.
--
-- Ownership (persistence.Leaser) moves from a lease per session to a lease
-- per member: the table members holds each member's lease, and a session's
-- owner and ownership epoch live in its sessions row, which every append
-- locks anyway, so that a fenced append and the acquisition of the next
-- epoch are serialized by that one row lock. A session row may now exist
-- at last_idx 0 (a session owned before its first append); Sessions skips
-- such rows as before. The epochs of the old leases table carry over, so
-- that they keep growing; stop every member of a cluster before starting
-- this build on its store (the old build fences by the leases table).
--
-- a2_append writes a group of appends of many sessions in one statement,
-- so one transaction and one WAL flush (docs/storage.md, "Append").

ALTER TABLE sessions ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0;

INSERT INTO sessions (session, last_idx, epoch)
    SELECT session, 0, epoch FROM leases
    ON CONFLICT (session) DO UPDATE SET epoch = GREATEST(sessions.epoch, EXCLUDED.epoch);

DROP TABLE IF EXISTS leases;

CREATE TABLE IF NOT EXISTS members (
    member     TEXT PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);

-- a2_append(sessions, expected, epochs, work, counts, ids, types, causes,
-- payloads, time_ms, tag) appends, in order, one batch per element of
-- sessions: batch i is the counts[i] events that follow the earlier
-- batches' in ids, types, causes and payloads. Per batch it answers one
-- row: status 0 (written at indexes last+1 ...), 1 (the session is at
-- index last, not at expected[i]: nothing written), 2 (the session is at
-- ownership epoch epoch, not at epochs[i]: nothing written) or 3 (an ID of
-- the batch is stored already: nothing written; the caller looks them up
-- and decides whether the batch replays). A batch's outcome never depends
-- on its neighbours': each locks its own session row, checks its own
-- index and epoch, and an ID conflict removes only its own rows. work[i]
-- is -1 (leave the work mark), 0 or 1. Callers order the batches by
-- session, so that two groups lock rows in the same order. Sequential
-- scans are off inside it: every lookup is by a unique key, and a plan
-- cached while the tables were empty must not scan them once they are not.
-- tag, when not empty, names the writing store in a notification of each
-- written batch on the channel a2_events (persistence/postgres, Notify).
CREATE OR REPLACE FUNCTION a2_append(
    p_sessions BYTEA[], p_expected BIGINT[], p_epochs BIGINT[], p_work SMALLINT[], p_counts INT[],
    p_ids BYTEA[], p_types BYTEA[], p_causes BYTEA[], p_payloads BYTEA[], p_time BIGINT, p_tag TEXT)
RETURNS TABLE (status SMALLINT, last BIGINT, epoch BIGINT)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $fn$
DECLARE
    i INT;
    n INT;
    lo INT := 1;
    hi INT;
    cur_last BIGINT;
    cur_epoch BIGINT;
    written BIGINT;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_sessions, 1), 0) LOOP
        n := p_counts[i];
        hi := lo + n - 1;
        INSERT INTO sessions AS s (session, last_idx) VALUES (p_sessions[i], 0)
            ON CONFLICT (session) DO UPDATE SET last_idx = s.last_idx
            RETURNING s.last_idx, s.epoch INTO cur_last, cur_epoch;
        IF cur_last <> p_expected[i] OR (p_epochs[i] <> 0 AND cur_epoch <> p_epochs[i]) THEN
            -- A resubmission replays whatever the index or epoch (OQ-36).
            IF EXISTS (SELECT 1 FROM events e WHERE e.id = ANY (p_ids[lo:hi])) THEN
                status := 3;
            ELSIF p_epochs[i] <> 0 AND cur_epoch <> p_epochs[i] THEN
                status := 2;
            ELSE
                status := 1;
            END IF;
        ELSE
            INSERT INTO events (session, idx, id, type, cause, time_ms, payload)
                SELECT p_sessions[i], cur_last + u.ord, u.id, u.type, u.cause, p_time, u.payload
                FROM unnest(p_ids[lo:hi], p_types[lo:hi], p_causes[lo:hi], p_payloads[lo:hi])
                    WITH ORDINALITY AS u(id, type, cause, payload, ord)
                ON CONFLICT (id) DO NOTHING;
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written < n THEN
                -- An ID is stored (or was stored meanwhile by a transaction
                -- this one waited for): take back this batch's rows.
                DELETE FROM events e WHERE e.session = p_sessions[i] AND e.idx > cur_last;
                status := 3;
            ELSE
                UPDATE sessions s SET last_idx = cur_last + n,
                    has_work = CASE p_work[i] WHEN 1 THEN TRUE WHEN 0 THEN FALSE ELSE s.has_work END
                    WHERE s.session = p_sessions[i];
                IF p_tag <> '' AND octet_length(p_sessions[i]) <= 3900 THEN
                    PERFORM pg_notify('a2_events', (cur_last + n)::TEXT || ' ' || encode(p_sessions[i], 'hex') || ' ' || p_tag);
                END IF;
                status := 0;
            END IF;
        END IF;
        last := cur_last;
        epoch := cur_epoch;
        RETURN NEXT;
        lo := hi + 1;
    END LOOP;
END
$fn$;

-- a2_lookup(ids) returns the stored events among ids, and a2_read(session,
-- after, limit) a page of a session's log, by their indexes (for the same
-- reason as a2_append).
CREATE OR REPLACE FUNCTION a2_lookup(p_ids BYTEA[])
RETURNS TABLE (session BYTEA, idx BIGINT, id BYTEA, type BYTEA, cause BYTEA, time_ms BIGINT, payload BYTEA)
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $fn$
    SELECT e.session, e.idx, e.id, e.type, e.cause, e.time_ms, e.payload FROM events e WHERE e.id = ANY (p_ids)
$fn$;

CREATE OR REPLACE FUNCTION a2_read(p_session BYTEA, p_after BIGINT, p_limit BIGINT)
RETURNS TABLE (session BYTEA, idx BIGINT, id BYTEA, type BYTEA, cause BYTEA, time_ms BIGINT, payload BYTEA)
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $fn$
    SELECT e.session, e.idx, e.id, e.type, e.cause, e.time_ms, e.payload FROM events e
    WHERE e.session = p_session AND e.idx > p_after ORDER BY e.idx LIMIT p_limit
$fn$;
