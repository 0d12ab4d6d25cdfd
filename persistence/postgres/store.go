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
// Appends commit in groups (group.go): the appends of many sessions that
// arrive while a group is in flight are written by the next one, one
// statement (the function a2_append_group, migration 6), so one round trip,
// one transaction and one WAL flush for all of them. The function locks
// the group's session rows (concurrent appends to one session queue on
// that row lock), compares each batch's expected index and ownership
// epoch, and inserts the events with ON CONFLICT (id) DO NOTHING: a batch one of whose
// IDs is stored writes nothing, and its IDs are then looked up and
// classified with persistence.Resubmission, exactly like the Pebble store
// (a resubmission replays whatever the index). Each batch gets its own
// answer; a neighbour's conflict never fails it. PostgreSQL makes the
// commit durable (with the default synchronous_commit=on) before an append
// is answered, and shows readers only committed rows, so no reader sees
// part of a batch.
//
// # Wait and Follow
//
// The store that wrote a batch hands it to its own followers and wakes its
// own waiters at once, without reading it back (follow.go). A session has
// one writer process at a time (a cluster's members fence each other by
// the ownership epoch), so that is every wake-up A2 needs. A waiter also
// re-reads every PollInterval, so a Wait on a session another process
// writes returns within that; with Options.Notify, every append also
// notifies the channel "a2_events" with the session's new last index, its
// hex-encoded ID and the tag of the store that wrote it, and a listener
// connection wakes the waiters and followers of a session another process
// appended to at once. Notifications are off by default: PostgreSQL wakes
// every listening connection of the database at every commit that
// notifies (a transaction each, 1.1 per turn in the single node's load),
// so their cost grows with the members times the appends of the cluster.
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
	"cmp"
	"context"
	"embed"
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
// "<last index> <hex of the session ID> <tag of the writing store>".
const notifyChannel = "a2_events"

// migrationLockKey is the advisory lock that serializes migrations of nodes
// starting together (pg_advisory_xact_lock).
const migrationLockKey int64 = 0x4132_6d69_6772_6174 // "A2migrat"

// maxAppendAttempts bounds the attempts of a group that failed on a
// deadlock or a serialization failure.
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
	// Notify turns on notifications of appends (LISTEN/NOTIFY, see the
	// package comment): Waits and live tails of a session that another
	// process appends to wake at once instead of at the next poll (a
	// tail, at its next read). Off by default.
	Notify bool
	// Committers is how many group commits may be in flight at once
	// (group.go); 0 means 2. Appends that arrive while every committer is
	// busy share the next group's transaction.
	Committers int
	// GroupLinger is how long, at most, a committer waits for more appends
	// to join its group when the previous group was busy (at least
	// lingerAfter batches): a loaded store runs fewer, larger transactions,
	// each of which costs the server CPU whatever it holds, and an idle
	// one answers at once (group.go). 0 means 5ms; negative: no wait.
	GroupLinger time.Duration
	// Now is the clock that stamps appended events; nil means time.Now.
	Now func() time.Time
	// BeforeCommit is a test hook: if set, every group runs in a
	// transaction of its own (BEGIN, a2_append_group, COMMIT, instead of the one
	// statement) and the hook is called, once per append of the group,
	// after the rows are written and before COMMIT, with the backend
	// process ID of the transaction's connection. An error aborts the group
	// (nothing is written).
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

	// tag names this store in its notifications, so that its listener
	// skips its own appends (their followers and waiters were told at
	// once); empty when notifications are off (Options.Notify).
	tag string
	// commit queues appends for group commit (group.go).
	commit committer
	// lookups queues Lookups that share one query (lookup.go).
	lookups lookupBatcher
	// follow holds the live tails (follow.go).
	follow *persistence.Fanout
}

var _ persistence.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL or a libpq
// keyword/value string), applies the embedded migrations that are not yet
// applied, and starts the listener of append notifications.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.SnapshotRetention < 0 || opts.MaxConns < 0 || opts.StatementTimeout < 0 || opts.PollInterval < 0 || opts.Committers < 0 {
		return nil, fmt.Errorf("%w: negative SnapshotRetention, MaxConns, StatementTimeout, PollInterval or Committers", persistence.ErrInvalid)
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
	rp["application_name"] = cmp.Or(rp["application_name"], "a2")

	s := &Store{
		retention: cmp.Or(opts.SnapshotRetention, defaultSnapshotRetention),
		poll:      cmp.Or(opts.PollInterval, defaultPollInterval),
		now:       opts.Now,
		hook:      opts.BeforeCommit,
		stopped:   make(chan struct{}),
		listener:  make(chan struct{}),
		waiters:   map[string]chan struct{}{},
	}
	if opts.Notify {
		s.tag = newTag()
	}
	s.commit.max = cmp.Or(opts.Committers, defaultCommitters)
	s.commit.linger = cmp.Or(opts.GroupLinger, defaultGroupLinger)
	s.follow = persistence.NewFanout(s.Read, s.stopped, func() error { return persistence.ErrClosed })
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
	if opts.Notify {
		go s.listen(cfg.ConnConfig.Copy())
	} else {
		close(s.listener)
	}
	return s, nil
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

// Append implements persistence.Store: the batch joins the next group
// commit (group.go) and Append waits for it, or (Async) is told when it
// has committed. A Preceded append is written first, in a group of its
// own, then the batch.
func (s *Store) Append(ctx context.Context, session string, expected uint64, events []protocol.Event, opts ...persistence.AppendOption) ([]protocol.Event, error) {
	o := persistence.OptionsOf(opts)
	switch {
	case o.Preceding != nil:
		return persistence.AppendInTurn(ctx, s.appendWait, session, expected, events, o)
	case o.Done != nil:
		done := o.Done
		o.Done = nil
		s.appendAsync(ctx, session, expected, events, o, done)
		return nil, nil
	}
	return s.appendWait(ctx, session, expected, events, o)
}

// retryable reports whether a group failed on a race that a new
// statement resolves: a deadlock between two groups or a serialization
// failure (CockroachDB's restart). Unique violations on event IDs do not
// happen: a2_append_group inserts with ON CONFLICT DO NOTHING and answers
// a batch as one with stored IDs (a group of several batches fails as a
// whole, SQLSTATE A2G01, and is written again one batch at a time).
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || errors.Is(err, persistence.ErrFailed) {
		return false
	}
	switch pgErr.Code {
	case "40P01", "40001":
		return true
	}
	return false
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
