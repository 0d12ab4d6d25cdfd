-- A2 store schema, version 5: a2_append locks a session's row without
-- writing it; a2_lookup keeps its plan (PL/pgSQL).
--
-- Version 4's a2_append locked each batch's session row with an upsert
-- (INSERT ... ON CONFLICT DO UPDATE SET last_idx = last_idx), which writes
-- a new version of the row before the append's own UPDATE writes another:
-- two row versions, their WAL and their index entries per batch where one
-- does. It now reads the row FOR UPDATE and upserts only when the row does
-- not exist yet. The answers are the same (version 4's comment on
-- a2_append holds), so this changes no caller. A node of a build before
-- this one refuses to start on a store at version 5 (it does not know the
-- version); nodes already running keep working.

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
        SELECT s.last_idx, s.epoch INTO cur_last, cur_epoch
            FROM sessions s WHERE s.session = p_sessions[i] FOR UPDATE;
        IF NOT FOUND THEN
            -- The session's first append (or first claim): a concurrent
            -- one that inserted it first is waited for, then locked.
            INSERT INTO sessions AS s (session, last_idx) VALUES (p_sessions[i], 0)
                ON CONFLICT (session) DO UPDATE SET last_idx = s.last_idx
                RETURNING s.last_idx, s.epoch INTO cur_last, cur_epoch;
        END IF;
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

-- a2_lookup runs on every push (its IDs are looked up before they are
-- admitted). Version 4's was a SQL function, whose query PostgreSQL plans
-- again at every call; as PL/pgSQL its plan is made once per connection
-- (with sequential scans off, as before).
CREATE OR REPLACE FUNCTION a2_lookup(p_ids BYTEA[])
RETURNS TABLE (session BYTEA, idx BIGINT, id BYTEA, type BYTEA, cause BYTEA, time_ms BIGINT, payload BYTEA)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $fn$
BEGIN
    RETURN QUERY SELECT e.session, e.idx, e.id, e.type, e.cause, e.time_ms, e.payload FROM events e WHERE e.id = ANY (p_ids);
END
$fn$;
