-- A2 store schema, version 6: a2_append_group, a group's append in a
-- constant number of statements.
--
-- a2_append (versions 4 and 5) runs three statements per batch (lock the
-- session row, insert the batch's events, update the row): a group of six
-- batches is eighteen statements, and each statement's start and end cost
-- the server about as much as inserting the rows it carries. This function
-- takes the same arguments and one more, batches: for each event, the
-- number (from 1) of the batch it belongs to. It answers the same rows
-- (a2_append's comment in version 4 holds) with, whatever the number of
-- batches:
--   1. one statement that locks the group's session rows, in the order of
--      their keys (so two groups lock in the same order), and reads them;
--   2. a computation of each batch's outcome, in the function's memory:
--      its session's index and epoch against the batch's expected index
--      and epoch, the index carried from an earlier batch of the same
--      session in the group (callers place them next to each other);
--   3. one INSERT of every accepted batch's events;
--   4. one UPDATE of the accepted batches' session rows.
-- A session without a row yet gets one first (one more statement, only
-- then). An accepted batch with a stored ID (the INSERT writes fewer rows
-- than it was given) cannot be told from its neighbours in one statement:
-- a group of one batch takes its rows back and answers 3, as version 5
-- does; a larger group fails as a whole with SQLSTATE A2G01, writing
-- nothing, and its caller writes each batch again as a group of its own.
-- A batch refused for its index or epoch is looked up for stored IDs (3
-- beats 1 and 2: a resubmission replays whatever the index), one
-- statement per refused batch, which only conflicts pay.
CREATE OR REPLACE FUNCTION a2_append_group(
    p_sessions BYTEA[], p_expected BIGINT[], p_epochs BIGINT[], p_work SMALLINT[], p_counts INT[],
    p_batches INT[], p_ids BYTEA[], p_types BYTEA[], p_causes BYTEA[], p_payloads BYTEA[], p_time BIGINT, p_tag TEXT)
RETURNS TABLE (status SMALLINT, last BIGINT, epoch BIGINT)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $fn$
DECLARE
    nb INT := coalesce(array_length(p_sessions, 1), 0);
    ns INT;
    i INT;
    j INT;
    lo INT := 1;
    hi INT;
    want BIGINT := 0;
    written BIGINT;
    -- The group's distinct sessions, in key order, with their rows.
    k_sessions BYTEA[];
    k_last BIGINT[];
    k_epoch BIGINT[];
    k_work SMALLINT[];
    k_written BOOLEAN[];
    -- Per batch: outcome, the index before it, its session's epoch, the
    -- index its first event gets minus one, and where its events start.
    b_status SMALLINT[] := array_fill(0::SMALLINT, ARRAY[nb]);
    b_last BIGINT[] := array_fill(0::BIGINT, ARRAY[nb]);
    b_epoch BIGINT[] := array_fill(0::BIGINT, ARRAY[nb]);
    b_base BIGINT[] := array_fill(0::BIGINT, ARRAY[nb]);
BEGIN
    IF nb = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(x.session ORDER BY x.session), array_agg(x.last_idx ORDER BY x.session), array_agg(x.epoch ORDER BY x.session)
        INTO k_sessions, k_last, k_epoch
        FROM (SELECT s.session, s.last_idx, s.epoch FROM sessions s
              WHERE s.session = ANY (p_sessions) ORDER BY s.session FOR UPDATE) x;
    -- The sessions that differ from the batch before: the distinct ones
    -- when the batches of a session are next to each other, more if not.
    ns := 1;
    FOR i IN 2 .. nb LOOP
        IF p_sessions[i] <> p_sessions[i - 1] THEN
            ns := ns + 1;
        END IF;
    END LOOP;
    IF coalesce(array_length(k_sessions, 1), 0) < ns THEN
        -- A session's first append (or first claim): a concurrent one that
        -- inserted it first is waited for; then every row is locked.
        INSERT INTO sessions (session, last_idx) SELECT DISTINCT u, 0 FROM unnest(p_sessions) u
            ON CONFLICT (session) DO NOTHING;
        SELECT array_agg(x.session ORDER BY x.session), array_agg(x.last_idx ORDER BY x.session), array_agg(x.epoch ORDER BY x.session)
            INTO k_sessions, k_last, k_epoch
            FROM (SELECT s.session, s.last_idx, s.epoch FROM sessions s
                  WHERE s.session = ANY (p_sessions) ORDER BY s.session FOR UPDATE) x;
    END IF;
    ns := array_length(k_sessions, 1);
    k_work := array_fill(-1::SMALLINT, ARRAY[ns]);
    k_written := array_fill(FALSE, ARRAY[ns]);
    j := 1;
    FOR i IN 1 .. nb LOOP
        hi := lo + p_counts[i] - 1;
        IF k_sessions[j] <> p_sessions[i] THEN
            j := array_position(k_sessions, p_sessions[i]);
        END IF;
        b_last[i] := k_last[j];
        b_epoch[i] := k_epoch[j];
        IF k_last[j] <> p_expected[i] OR (p_epochs[i] <> 0 AND k_epoch[j] <> p_epochs[i]) THEN
            -- A resubmission replays whatever the index or epoch (OQ-36).
            IF EXISTS (SELECT 1 FROM events e WHERE e.id = ANY (p_ids[lo:hi])) THEN
                b_status[i] := 3;
            ELSIF p_epochs[i] <> 0 AND k_epoch[j] <> p_epochs[i] THEN
                b_status[i] := 2;
            ELSE
                b_status[i] := 1;
            END IF;
        ELSE
            b_base[i] := k_last[j] - lo + 1;
            k_last[j] := k_last[j] + p_counts[i];
            k_written[j] := TRUE;
            IF p_work[i] <> -1 THEN
                k_work[j] := p_work[i];
            END IF;
            want := want + p_counts[i];
        END IF;
        lo := hi + 1;
    END LOOP;
    IF want > 0 THEN
        INSERT INTO events (session, idx, id, type, cause, time_ms, payload)
            SELECT p_sessions[u.b], b_base[u.b] + u.ord, u.id, u.type, u.cause, p_time, u.payload
            FROM unnest(p_batches, p_ids, p_types, p_causes, p_payloads) WITH ORDINALITY AS u(b, id, type, cause, payload, ord)
            WHERE b_status[u.b] = 0
            ON CONFLICT (id) DO NOTHING;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written < want THEN
            IF nb > 1 THEN
                RAISE EXCEPTION 'a2_append_group: an accepted batch has a stored event ID' USING ERRCODE = 'A2G01';
            END IF;
            -- An ID is stored (or was stored meanwhile by a transaction
            -- this one waited for): take back this batch's rows.
            DELETE FROM events e WHERE e.session = p_sessions[1] AND e.idx > b_last[1];
            b_status[1] := 3;
        ELSE
            UPDATE sessions s SET last_idx = k.last,
                has_work = CASE k.work WHEN 1 THEN TRUE WHEN 0 THEN FALSE ELSE s.has_work END
                FROM unnest(k_sessions, k_last, k_work, k_written) AS k(session, last, work, written)
                WHERE k.written AND s.session = k.session;
            IF p_tag <> '' THEN
                PERFORM pg_notify('a2_events', k.last::TEXT || ' ' || encode(k.session, 'hex') || ' ' || p_tag)
                    FROM unnest(k_sessions, k_last, k_written) AS k(session, last, written)
                    WHERE k.written AND octet_length(k.session) <= 3900;
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT u.st, u.la, u.ep FROM unnest(b_status, b_last, b_epoch) AS u(st, la, ep);
END
$fn$;
