// Package postgres is a persistence.Store on PostgreSQL, through
// github.com/jackc/pgx/v5, for clusters whose nodes share one store.
//
// # Schema
//
// Three tables, created by the embedded migrations (migrations/*.sql) that
// Open applies under a transaction-scoped advisory lock, recorded in
// schema_migrations: events (session, idx, unique id, type, cause, time,
// payload), sessions (session, last_idx) and snapshots (session, reducer,
// idx, state). Strings are stored as bytea (their UTF-8 bytes), so they
// compare byte for byte (Sessions pages in byte order like the Pebble store)
// and may hold NUL; payloads and states are bytea, kept byte for byte.
//
// # Append
//
// One READ COMMITTED transaction per Append: an upsert of the session's row
// locks it and returns its last index (concurrent appends to one session
// queue on that row lock); the batch's IDs are looked up (duplicates are
// classified with persistence.Resubmission before the index check, exactly
// like the Pebble store); the expected index is compared; the events are
// inserted, the session row advanced and a NOTIFY sent, then the transaction
// commits. The unique constraint on events.id makes an ID unique across
// sessions: when two transactions insert the same new ID, the later fails
// with a unique violation, is rolled back and retried, and then finds the
// stored event. PostgreSQL makes the commit durable (with the default
// synchronous_commit=on) before Append returns, and shows readers only
// committed rows, so no reader sees part of a batch.
//
// # Wait
//
// Every append transaction notifies the channel "a2_events" with the
// session's new last index and hex-encoded ID. A listener connection wakes the waiters
// of that session, who re-read the last index; a waiter also re-reads it
// every PollInterval, so a notification lost with a dropped listener
// connection delays a wake-up but never loses it.
//
// # Failure
//
// An error before COMMIT leaves nothing written (PostgreSQL rolls the
// transaction back) and is returned wrapped. An error of the COMMIT itself
// (the connection lost, the server restarted) leaves the outcome unknown and
// wraps persistence.ErrFailed. Unlike the Pebble store, this store does not
// refuse later calls after ErrFailed: PostgreSQL serves only committed rows,
// so nothing that might not be durable can be served, and the pool
// reconnects. Resubmit the same batch: it replays if it landed.
package postgres

import (
	"context"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// notifyChannel is the LISTEN/NOTIFY channel of appends. Its payload is
// "<last index> <hex of the session ID>".
const notifyChannel = "a2_events"

// maxNotifyPayload keeps NOTIFY payloads under PostgreSQL's 8000-byte
// limit; a session with a longer ID (over 3900 bytes) is woken by polling only.
const maxNotifyPayload = 7900

// migrationLockKey is the advisory lock that serializes migrations of nodes
// starting together (pg_advisory_xact_lock).
const migrationLockKey int64 = 0x4132_6d69_6772_6174 // "A2migrat"

// maxAppendAttempts bounds the retries of an Append whose transaction lost a
// race on an event ID (unique violation), a deadlock or a serialization
// failure.
const maxAppendAttempts = 5

// Options configure Open. The zero value is the production default.
type Options struct {
	// MaxConns is the pool's maximum number of connections; 0 means pgx's
	// default (the greater of 4 and the number of CPUs), or pool_max_conns
	// in the URL. The LISTEN connection is separate and not counted.
	MaxConns int32
	// StatementTimeout, if positive, sets statement_timeout on every
	// connection: a statement running longer fails (and its transaction
	// writes nothing).
	StatementTimeout time.Duration
	// Schema, if set, is the schema holding A2's tables: Open creates it if
	// missing and sets it as the connections' search_path. Empty means the
	// search_path of the URL or the server (normally "public").
	Schema string
	// SnapshotRetention is how many snapshots SaveSnapshot keeps per session
	// and reducer, those with the highest indexes; 0 means 2.
	SnapshotRetention int
	// PollInterval is how often a blocked Wait re-reads the last index even
	// without a notification; 0 means 500ms.
	PollInterval time.Duration
	// Now is the clock that stamps appended events; nil means time.Now.
	Now func() time.Time
	// BeforeCommit is a test hook: if set, Append calls it inside its
	// transaction, after the rows are written and before COMMIT, with the
	// backend process ID of the transaction's connection. An error aborts
	// the append (nothing is written).
	BeforeCommit func(ctx context.Context, session string, backendPID uint32) error
}

const (
	defaultSnapshotRetention = 2
	defaultPollInterval      = 500 * time.Millisecond
)

// Store is a persistence.Store on a PostgreSQL database. Use Open to make
// one.
type Store struct {
	pool      *pgxpool.Pool
	retention int
	poll      time.Duration
	now       func() time.Time
	hook      func(ctx context.Context, session string, backendPID uint32) error

	life struct {
		sync.Mutex
		idle   *sync.Cond
		active int
		closed bool
	}
	stopped  chan struct{} // closed by Close: wakes Wait and the listener
	listener chan struct{} // closed when the listener goroutine has ended

	waitMu  sync.Mutex
	waiters map[string]chan struct{} // closed and removed on a notification
}

var _ persistence.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL or a libpq
// keyword/value string), applies the embedded migrations that are not yet
// applied, and starts the listener of append notifications.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.SnapshotRetention < 0 || opts.MaxConns < 0 || opts.StatementTimeout < 0 || opts.PollInterval < 0 {
		return nil, fmt.Errorf("%w: negative SnapshotRetention, MaxConns, StatementTimeout or PollInterval", persistence.ErrInvalid)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL with its password; say less.
		return nil, fmt.Errorf("%w: persistence/postgres: cannot parse the database URL", persistence.ErrInvalid)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	rp := cfg.ConnConfig.RuntimeParams
	if opts.StatementTimeout > 0 {
		rp["statement_timeout"] = strconv.FormatInt(max(opts.StatementTimeout.Milliseconds(), 1), 10)
	}
	if opts.Schema != "" {
		rp["search_path"] = pgx.Identifier{opts.Schema}.Sanitize()
	}
	rp["application_name"] = cmpOr(rp["application_name"], "a2")

	s := &Store{
		retention: cmpOr(opts.SnapshotRetention, defaultSnapshotRetention),
		poll:      cmpOr(opts.PollInterval, defaultPollInterval),
		now:       opts.Now,
		hook:      opts.BeforeCommit,
		stopped:   make(chan struct{}),
		listener:  make(chan struct{}),
		waiters:   map[string]chan struct{}{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.life.idle = sync.NewCond(&s.life.Mutex)

	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: connect: %w", err)
	}
	if err := migrate(ctx, s.pool, opts.Schema); err != nil {
		s.pool.Close()
		return nil, err
	}
	go s.listen(cfg.ConnConfig.Copy())
	return s, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// migrate applies, in one transaction holding an advisory lock, every
// embedded migration whose version schema_migrations does not list. Nodes
// starting together queue on the lock; the second finds everything applied.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("persistence/postgres: list migrations: %w", err)
	}
	slices.Sort(names)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("persistence/postgres: migrate: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey); err != nil {
		return fmt.Errorf("persistence/postgres: migrate: take the migration lock: %w", err)
	}
	if schema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("persistence/postgres: migrate: create schema %q: %w", schema, err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version BIGINT PRIMARY KEY,
		name TEXT NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("persistence/postgres: migrate: create schema_migrations: %w", err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("persistence/postgres: migrate: read schema_migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("persistence/postgres: migrate: read schema_migrations: %w", err)
	}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		version, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return fmt.Errorf("persistence/postgres: migration file %s does not start with a version number", base)
		}
		if slices.Contains(applied, version) {
			continue
		}
		sql, err := migrationFiles.ReadFile(name)
		if err != nil {
			return fmt.Errorf("persistence/postgres: read migration %s: %w", base, err)
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("persistence/postgres: apply migration %s: %w", base, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, base); err != nil {
			return fmt.Errorf("persistence/postgres: record migration %s: %w", base, err)
		}
	}
	if maxApplied := slices.Max(append(applied, 0)); len(names) > 0 && maxApplied > int64(len(names))*1000 {
		// Cheap guard against a database migrated by a much newer build.
		return fmt.Errorf("persistence/postgres: schema_migrations lists version %d, unknown to this build", maxApplied)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("persistence/postgres: migrate: commit: %w", err)
	}
	return nil
}

// Append implements persistence.Store (see the package comment for the
// transaction).
func (s *Store) Append(ctx context.Context, session string, expected uint64, events []protocol.Event) ([]protocol.Event, error) {
	return s.appendWork(ctx, session, expected, events, persistence.AppendOptions{})
}

// appendWork is Append that, with a non-nil work, sets or clears the
// session's work mark in the same transaction.
func (s *Store) appendWork(ctx context.Context, session string, expected uint64, events []protocol.Event, opts persistence.AppendOptions) ([]protocol.Event, error) {
	batch, err := persistence.PrepareBatch(session, events)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	for attempt := 1; ; attempt++ {
		out, err := s.appendOnce(ctx, session, expected, batch, opts)
		if err == nil || attempt == maxAppendAttempts || !retryable(err) || ctx.Err() != nil {
			return out, err
		}
	}
}

// retryable reports whether an append failed on a race that a new
// transaction resolves: a unique violation on the event ID (the other
// transaction's event is now stored), a deadlock between two batches
// inserting the same IDs in different orders, or a serialization failure.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || errors.Is(err, persistence.ErrFailed) {
		return false
	}
	switch pgErr.Code {
	case "23505", "40P01", "40001":
		return true
	}
	return false
}

// appendOnce runs one append transaction.
func (s *Store) appendOnce(ctx context.Context, session string, expected uint64, batch []protocol.Event, opts persistence.AppendOptions) ([]protocol.Event, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: append to session %q: begin (nothing written): %w", session, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	// Lock the session's row (creating it at 0 if new; rolled back unless
	// the append commits) and read its last index.
	var last int64
	err = tx.QueryRow(ctx, `INSERT INTO sessions (session, last_idx) VALUES ($1, 0)
		ON CONFLICT (session) DO UPDATE SET last_idx = sessions.last_idx
		RETURNING last_idx`, []byte(session)).Scan(&last)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: append to session %q: lock the session (nothing written): %w", session, err)
	}

	// Duplicates first (OQ-36).
	ids := make([][]byte, len(batch))
	for i := range batch {
		ids[i] = []byte(batch[i].ID)
	}
	found, err := queryEvents(ctx, tx, "WHERE id = ANY($1)", ids)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: append to session %q: look up event IDs (nothing written): %w", session, err)
	}
	if len(found) > 0 {
		byID := make(map[string]*protocol.Event, len(found))
		for i := range found {
			byID[found[i].ID] = &found[i]
		}
		stored := make([]*protocol.Event, len(batch))
		for i := range batch {
			stored[i] = byID[batch[i].ID]
		}
		return persistence.Resubmission(batch, stored)
	}
	if opts.Epoch != 0 {
		// FOR SHARE: an acquisition of the next epoch waits for this
		// transaction, and this one for an acquisition under way.
		var epoch int64
		var owner string
		err := tx.QueryRow(ctx, "SELECT epoch, owner FROM leases WHERE session = $1 FOR SHARE", []byte(session)).Scan(&epoch, &owner)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("persistence/postgres: append to session %q: read its lease (nothing written): %w", session, err)
		}
		if uint64(epoch) != opts.Epoch {
			return nil, fmt.Errorf("%w: session %q is at lease epoch %d (owner %q), the append's is %d", persistence.ErrLeaseLost, session, epoch, owner, opts.Epoch)
		}
	}
	if uint64(last) != expected {
		return nil, fmt.Errorf("%w: session %q is at index %d, append expected %d", persistence.ErrIndexConflict, session, last, expected)
	}

	now := s.now().UnixMilli()
	n := len(batch)
	idxs, types, causes, times := make([]int64, n), make([][]byte, n), make([][]byte, n), make([]int64, n)
	payloads := make([][]byte, n)
	for i := range batch {
		e := &batch[i]
		e.Index, e.Time = uint64(last)+1+uint64(i), now
		idxs[i], types[i], causes[i], times[i] = int64(e.Index), []byte(e.Type), []byte(e.Cause), now
		payloads[i] = []byte(e.Payload)
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
	}
	newLast := last + int64(n)
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO events (session, idx, id, type, cause, time_ms, payload)
		SELECT $1, u.idx, u.id, u.type, u.cause, u.time_ms, u.payload
		FROM unnest($2::bigint[], $3::bytea[], $4::bytea[], $5::bytea[], $6::bigint[], $7::bytea[])
			AS u(idx, id, type, cause, time_ms, payload)`,
		[]byte(session), idxs, ids, types, causes, times, payloads)
	if opts.Work != nil {
		b.Queue("UPDATE sessions SET last_idx = $2, has_work = $3 WHERE session = $1", []byte(session), newLast, *opts.Work)
	} else {
		b.Queue("UPDATE sessions SET last_idx = $2 WHERE session = $1", []byte(session), newLast)
	}
	if payload := strconv.FormatInt(newLast, 10) + " " + hex.EncodeToString([]byte(session)); len(payload) <= maxNotifyPayload {
		b.Queue("SELECT pg_notify($1, $2)", notifyChannel, payload)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("persistence/postgres: append to session %q at indexes %d..%d (nothing written): %w", session, last+1, newLast, err)
	}
	if s.hook != nil {
		if err := s.hook(ctx, session, tx.Conn().PgConn().PID()); err != nil {
			return nil, fmt.Errorf("persistence/postgres: append to session %q: BeforeCommit hook (nothing written): %w", session, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
			// The server answered the COMMIT with an ordinary error (a
			// deferred constraint, a serialization failure): rolled back.
			// A FATAL (the backend terminated) leaves the outcome unknown.
			return nil, fmt.Errorf("persistence/postgres: append to session %q at indexes %d..%d: commit refused (nothing written): %w", session, last+1, newLast, err)
		}
		return nil, fmt.Errorf("%w: append to session %q at indexes %d..%d: commit: outcome unknown, resubmit the same batch: %w",
			persistence.ErrFailed, session, last+1, newLast, err)
	}
	return batch, nil
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryEvents selects events with the given WHERE/ORDER/LIMIT clause.
func queryEvents(ctx context.Context, q querier, clause string, args ...any) ([]protocol.Event, error) {
	rows, err := q.Query(ctx, "SELECT session, idx, id, type, cause, time_ms, payload FROM events "+clause, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []protocol.Event
	for rows.Next() {
		var (
			e                       protocol.Event
			idx                     int64
			session, id, typ, cause []byte
			payload                 []byte
		)
		if err := rows.Scan(&session, &idx, &id, &typ, &cause, &e.Time, &payload); err != nil {
			return nil, err
		}
		e.Session, e.ID, e.Type, e.Cause = string(session), string(id), string(typ), string(cause)
		if idx < 1 {
			return nil, fmt.Errorf("%w: events row of session %q, id %q has index %d", persistence.ErrCorrupt, e.Session, e.ID, idx)
		}
		e.Index, e.Payload = uint64(idx), payload
		out = append(out, e)
	}
	return out, rows.Err()
}

// Lookup implements persistence.Store.
func (s *Store) Lookup(ctx context.Context, ids []string) ([]protocol.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	want := make([][]byte, 0, len(ids))
	for _, id := range ids {
		if id != "" {
			want = append(want, []byte(id))
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	found, err := queryEvents(ctx, s.pool, "WHERE id = ANY($1)", want)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: look up %d event IDs: %w", len(want), err)
	}
	byID := make(map[string]protocol.Event, len(found))
	for _, e := range found {
		byID[e.ID] = e
	}
	var out []protocol.Event
	for _, id := range ids {
		if e, ok := byID[id]; ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// Read implements persistence.Store. A gap in the returned indexes is
// reported as ErrCorrupt.
func (s *Store) Read(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error) {
	if err := persistence.CheckRead(ctx, session, limit); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit == 0 || after >= math.MaxInt64 {
		return nil, nil
	}
	out, err := queryEvents(ctx, s.pool, "WHERE session = $1 AND idx > $2 ORDER BY idx LIMIT $3", []byte(session), int64(after), int64(limit))
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: read session %q after index %d: %w", session, after, err)
	}
	for i, e := range out {
		if want := after + 1 + uint64(i); e.Index != want {
			return nil, fmt.Errorf("%w: events of session %q: index %d follows %d", persistence.ErrCorrupt, session, e.Index, want-1)
		}
	}
	return out, nil
}

// LastIndex implements persistence.Store.
func (s *Store) LastIndex(ctx context.Context, session string) (uint64, error) {
	if err := persistence.CheckSession(session); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	return s.lastIndex(ctx, session)
}

func (s *Store) lastIndex(ctx context.Context, session string) (uint64, error) {
	var last int64
	err := s.pool.QueryRow(ctx, "SELECT last_idx FROM sessions WHERE session = $1", []byte(session)).Scan(&last)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("persistence/postgres: last index of session %q: %w", session, err)
	case last < 0:
		return 0, fmt.Errorf("%w: sessions row %q has last index %d", persistence.ErrCorrupt, session, last)
	}
	return uint64(last), nil
}

// Wait implements persistence.Store. The waiter registers for the session's
// notifications before it reads the last index, so an append committed
// after the read wakes it; it also re-reads every PollInterval. A read that
// fails (the database is restarting) is retried at the next poll rather than
// returned, until ctx ends or the store closes.
func (s *Store) Wait(ctx context.Context, session string, after uint64) (uint64, error) {
	if err := persistence.CheckSession(session); err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	s.leave()
	timer := time.NewTimer(s.poll)
	defer timer.Stop()
	for {
		woken := s.waitChan(session)
		if err := s.enter(); err != nil {
			return 0, err
		}
		last, err := s.lastIndex(ctx, session)
		s.leave()
		if err == nil && last > after {
			return last, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, persistence.ErrCorrupt) {
			return 0, err
		}
		timer.Reset(s.poll)
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-s.stopped:
			return 0, fmt.Errorf("%w: Wait on session %q", persistence.ErrClosed, session)
		}
	}
}

// waitChan returns the channel closed at the session's next notification.
func (s *Store) waitChan(session string) chan struct{} {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	c, ok := s.waiters[session]
	if !ok {
		c = make(chan struct{})
		s.waiters[session] = c
	}
	return c
}

// wake closes the waiting channel of session, or of every session when all
// is set (after the listener reconnects, notifications may have been lost).
func (s *Store) wake(session string, all bool) {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if all {
		for k, c := range s.waiters {
			close(c)
			delete(s.waiters, k)
		}
		return
	}
	if c, ok := s.waiters[session]; ok {
		close(c)
		delete(s.waiters, session)
	}
}

// listen holds a connection that LISTENs on the notification channel and
// wakes waiters, reconnecting (with a growing pause) until Close.
func (s *Store) listen(cfg *pgx.ConnConfig) {
	defer close(s.listener)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stopped
		cancel()
	}()
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+notifyChannel); err == nil {
				pause = 50 * time.Millisecond
				s.wake("", true) // notifications may have been missed while disconnected
				for {
					n, err := conn.WaitForNotification(ctx)
					if err != nil {
						break
					}
					if _, hexSession, ok := strings.Cut(n.Payload, " "); ok {
						if session, err := hex.DecodeString(hexSession); err == nil {
							s.wake(string(session), false)
						}
					}
				}
			}
			_ = conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(pause*2, 2*time.Second)
	}
}

// Sessions implements persistence.Store.
func (s *Store) Sessions(ctx context.Context, after string, limit int) ([]string, error) {
	if err := persistence.CheckLimit(limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT session FROM sessions WHERE session > $1 AND last_idx > 0 ORDER BY session LIMIT $2`, []byte(after), limit)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: list sessions after %q: %w", after, err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var b []byte
		err := r.Scan(&b)
		return string(b), err
	})
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: list sessions after %q: %w", after, err)
	}
	return list, nil
}

// SaveSnapshot implements persistence.Store: an upsert and the deletion of
// the snapshots beyond the retention count, in one transaction.
func (s *Store) SaveSnapshot(ctx context.Context, snap persistence.Snapshot) error {
	if snap.Index > math.MaxInt64 {
		return fmt.Errorf("%w: snapshot index %d does not fit PostgreSQL's bigint", persistence.ErrInvalid, snap.Index)
	}
	if err := persistence.CheckSnapshot(ctx, snap.Session, snap.Reducer); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	state := snap.State
	if state == nil {
		state = []byte{}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO snapshots (session, reducer, idx, state) VALUES ($1, $2, $3, $4)
			ON CONFLICT (session, reducer, idx) DO UPDATE SET state = excluded.state`,
			[]byte(snap.Session), []byte(snap.Reducer), int64(snap.Index), state)
		b.Queue(`DELETE FROM snapshots WHERE session = $1 AND reducer = $2 AND idx < (
			SELECT min(idx) FROM (SELECT idx FROM snapshots WHERE session = $1 AND reducer = $2
				ORDER BY idx DESC LIMIT $3) AS kept)`,
			[]byte(snap.Session), []byte(snap.Reducer), s.retention)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("persistence/postgres: save snapshot of session %q reducer %q at index %d: %w", snap.Session, snap.Reducer, snap.Index, err)
	}
	return nil
}

// LoadSnapshot implements persistence.Store.
func (s *Store) LoadSnapshot(ctx context.Context, session, reducer string) (persistence.Snapshot, bool, error) {
	if err := persistence.CheckSnapshot(ctx, session, reducer); err != nil {
		return persistence.Snapshot{}, false, err
	}
	if err := s.enter(); err != nil {
		return persistence.Snapshot{}, false, err
	}
	defer s.leave()
	var (
		idx   int64
		state []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT idx, state FROM snapshots WHERE session = $1 AND reducer = $2
		ORDER BY idx DESC LIMIT 1`, []byte(session), []byte(reducer)).Scan(&idx, &state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return persistence.Snapshot{}, false, nil
	case err != nil:
		return persistence.Snapshot{}, false, fmt.Errorf("persistence/postgres: load snapshot of session %q reducer %q: %w", session, reducer, err)
	case idx < 0:
		return persistence.Snapshot{}, false, fmt.Errorf("%w: snapshot of session %q reducer %q has index %d", persistence.ErrCorrupt, session, reducer, idx)
	}
	return persistence.Snapshot{Session: session, Reducer: reducer, Index: uint64(idx), State: state}, true, nil
}

// Close implements persistence.Store: it wakes blocked Waits, waits for the
// calls in progress and the listener, and closes the pool.
func (s *Store) Close() error {
	s.life.Lock()
	if s.life.closed {
		s.life.Unlock()
		return nil
	}
	s.life.closed = true
	close(s.stopped)
	for s.life.active > 0 {
		s.life.idle.Wait()
	}
	s.life.Unlock()
	<-s.listener
	s.pool.Close()
	return nil
}

// enter counts a call in progress, or fails when the store is closed.
func (s *Store) enter() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.closed {
		return persistence.ErrClosed
	}
	s.life.active++
	return nil
}

func (s *Store) leave() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.active--; s.life.active == 0 {
		s.life.idle.Broadcast()
	}
}
