// Package pebble is the embedded default persistence.Store, on Pebble
// (github.com/cockroachdb/pebble/v2), the LSM key-value store of CockroachDB.
//
// One Pebble database holds every session. The key layout and the record
// encodings are documented in docs/storage.md; keys.go and record.go are
// their implementation.
//
// # Durability and group commit
//
// Every write is one Pebble batch committed with a WAL sync
// (pebble.Sync): Append returns only after the batch is on stable storage.
// Appends of different sessions run concurrently; the store's committer
// merges the batches queued while a group commits into one Pebble batch and
// one sync (groupcommit.go), so concurrent sessions share syncs (measured
// in docs/benchmarks.md).
//
// # Per-session serialization
//
// Appends to one session are serialized by a mutex of that session (see
// sessionState), held from the duplicate and expected-index checks through
// the synced commit, so the check and the write are atomic per session. The
// last index of a session is cached in memory after its first load, and an
// in-memory filter of stored event IDs (see idFilter) answers "certainly
// new" for almost every ID, so the hot path usually reads nothing from
// Pebble before writing. Event IDs are unique across sessions; the check
// "is this ID stored?" and the write that stores it are made atomic across
// sessions by claiming the IDs in memory first (see idClaims).
//
// # Visibility
//
// Pebble publishes a committed batch to readers before its WAL sync ends.
// Reads are therefore bounded by the acknowledged last index of the session,
// which advances only after the sync: no reader sees an event a crash could
// take back.
//
// # Failure
//
// Pebble treats a failed WAL write or sync as fatal: it calls
// Logger.Fatalf, whose default exits the process, and a later commit may
// panic. The store installs a logger whose Fatalf panics with a marker,
// recovers it (and any other panic of a commit) in the writing call, and
// turns it into persistence.ErrFailed. From then on every call returns
// ErrFailed: the failed batch may be visible in Pebble's memtable without
// being durable, so nothing more is served. Close the store and open it
// again (after a panic inside Pebble's commit pipeline the database cannot
// be closed cleanly; Close says so, and the directory must be reopened by a
// new process or, in tests, from a crash clone of the filesystem).
package pebble

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/persistence"
)

// Options configure Open. The zero value is the production default: the
// operating system's filesystem, 2 snapshots kept per session and reducer.
type Options struct {
	// FS is the filesystem Pebble uses; nil means the operating system's
	// (vfs.Default). Tests pass vfs.NewMem(), vfs.NewCrashableMem() or an
	// errorfs wrapper.
	FS vfs.FS
	// SnapshotRetention is how many snapshots SaveSnapshot keeps per session
	// and reducer, those with the highest indexes; 0 means 2.
	SnapshotRetention int
	// SessionCacheSize bounds the number of idle sessions whose last index
	// stays cached in memory; 0 means 65,536. Sessions in use are always
	// cached.
	SessionCacheSize int
	// IDFilterBitsPerKey sizes the in-memory bloom filter of stored event IDs
	// that spares Append a Pebble lookup for a new ID (see idFilter): bits
	// per ID, 0 means 10 (about 1.25 bytes per stored event, a 1% false
	// positive rate). Open starts filling it with a background scan of the
	// event-ID index (about half a second per million stored events on a
	// 2-core machine); until the scan ends, and when the filter is disabled
	// with a negative value, Append looks every ID up in Pebble.
	IDFilterBitsPerKey int
	// CacheSize is the size of Pebble's block cache in bytes; 0 means 64 MiB.
	// Pebble reserves its memtables (up to twice the 4 MiB memtable size)
	// out of this budget, so its own default of 8 MiB leaves no room for
	// blocks, and every event-ID lookup of Append would read from disk.
	CacheSize int64
	// Logger receives Pebble's log lines; nil means Pebble's default logger
	// (standard library log). Its Fatalf is never called: fatal errors become
	// persistence.ErrFailed and are logged with Errorf.
	Logger pebbledb.Logger
	// Now is the clock that stamps appended events; nil means time.Now.
	Now func() time.Time
	// Tune, if set, adjusts Pebble's options before Open (cache size,
	// memtable size, ...). It must not disable the WAL or change FS, Logger
	// or Comparer.
	Tune func(*pebbledb.Options)
}

const (
	defaultSnapshotRetention  = 2
	defaultSessionCacheSize   = 1 << 16
	defaultCacheSize          = 64 << 20
	defaultMemTableSize       = 64 << 20
	defaultIDFilterBitsPerKey = 10
)

// Store is a persistence.Store on one Pebble database. Use Open to make one.
type Store struct {
	db        *pebbledb.DB
	retention int
	now       func() time.Time
	sessions  *registry
	// recent bounds the sessions that keep their latest events in memory
	// for new followers (sessionState.recent); nil keeps none.
	recent *recentTails
	claims *idClaims
	ids    *idFilter // nil when disabled

	// life counts calls in progress so that Close can wait for them before
	// closing Pebble, and records the closed and failed states.
	life struct {
		sync.Mutex
		idle    *sync.Cond // signalled when active drops to 0
		active  int
		closed  bool
		failure error // the first ErrFailed; nil while healthy
		wedged  bool  // a panic inside Pebble's commit pipeline was recovered
	}
	stopOnce sync.Once
	stopped  chan struct{} // closed on Close or failure; wakes Wait

	group groupCommit
}

var _ persistence.Store = (*Store)(nil)

// Open opens the store in dir, creating it if needed. Opening replays
// Pebble's WAL, so everything an acknowledged Append wrote is there.
func Open(dir string, opts Options) (st *Store, err error) {
	if opts.SnapshotRetention < 0 || opts.SessionCacheSize < 0 || opts.CacheSize < 0 {
		return nil, fmt.Errorf("%w: negative SnapshotRetention, SessionCacheSize or CacheSize", persistence.ErrInvalid)
	}
	s := &Store{
		retention: opts.SnapshotRetention,
		now:       opts.Now,
		sessions:  newRegistry(opts.SessionCacheSize),
		recent:    &recentTails{},
		claims:    newIDClaims(),
		stopped:   make(chan struct{}),
	}
	if s.retention == 0 {
		s.retention = defaultSnapshotRetention
	}
	if opts.SessionCacheSize == 0 {
		s.sessions.max = defaultSessionCacheSize
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.life.idle = sync.NewCond(&s.life.Mutex)

	po := pebbleOptions(opts)
	defer func() {
		if r := recover(); r != nil {
			st, err = nil, fmt.Errorf("persistence/pebble: open %s: pebble: %v", dir, r)
		}
	}()
	db, err := pebbledb.Open(dir, po)
	if err != nil {
		if errors.Is(err, pebbledb.ErrCorruption) {
			return nil, fmt.Errorf("%w: open %s: %w", persistence.ErrCorrupt, dir, err)
		}
		return nil, fmt.Errorf("persistence/pebble: open %s: %w", dir, err)
	}
	s.db = db
	s.startCommitter()
	if err := s.checkFormat(); err != nil {
		s.stopCommitter()
		if !s.life.wedged {
			_ = db.Close()
		}
		return nil, err
	}
	if opts.IDFilterBitsPerKey >= 0 {
		s.ids = newIDFilter(cmp.Or(opts.IDFilterBitsPerKey, defaultIDFilterBitsPerKey), idFilterFirstLayer)
		s.life.active++ // the scan is a call in progress; it calls leave
		go s.scanIDs(s.ids, po.Logger)
	}
	return s, nil
}

// scanIDs adds every stored event ID to the filter, then marks it ready. It
// runs in the background from Open, counted as a call in progress so that
// Close waits for it, and stops early when the store closes.
func (s *Store) scanIDs(f *idFilter, logger pebbledb.Logger) {
	defer s.leave()
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: []byte{tagID}, UpperBound: []byte{tagID + 1}})
	if err != nil {
		logger.Errorf("persistence/pebble: scan of event IDs failed, appends will look every ID up: %v", err)
		return
	}
	var hashes [][2]uint32
	n := 0
	for valid := iter.First(); valid; valid = iter.Next() {
		if n++; n%4096 == 0 {
			select {
			case <-s.stopped:
				_ = iter.Close()
				return
			default:
			}
		}
		h1, h2 := f.hashesOf(iter.Key()[1:])
		hashes = append(hashes, [2]uint32{h1, h2})
	}
	err = iter.Error()
	if cerr := iter.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		logger.Errorf("persistence/pebble: scan of event IDs failed, appends will look every ID up: %v", err)
		return
	}
	f.addScanned(hashes)
}

// pebbleOptions are the Pebble options of a store opened with opts.
func pebbleOptions(opts Options) *pebbledb.Options {
	cacheSize := opts.CacheSize
	if cacheSize == 0 {
		cacheSize = defaultCacheSize
	}
	po := &pebbledb.Options{
		FS:                 opts.FS,
		FormatMajorVersion: pebbledb.FormatNewest,
		CacheSize:          cacheSize,
		// Pebble's 4 MiB default flushed about every second under a
		// thousand model streams, and the compactions that followed took a
		// seventh of the CPU (docs/storage.md, options).
		MemTableSize: defaultMemTableSize,
	}
	// Every Append looks its event IDs up, and almost every lookup misses.
	// Without filters a miss reads a block of every sstable whose key range
	// holds the ID (event IDs spread over the whole keyspace, so all of L0);
	// with bloom filters most sstables answer "absent" from a cached filter.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	if opts.Tune != nil {
		opts.Tune(po)
	}
	logger := opts.Logger
	if logger == nil {
		logger = pebbledb.DefaultLogger
	}
	po.Logger = fatalLogger{logger}
	return po
}

// checkFormat writes the format version into a new store and refuses a
// store written with another version.
func (s *Store) checkFormat() error {
	v, closer, err := s.db.Get(formatKey)
	if errors.Is(err, pebbledb.ErrNotFound) {
		b := s.db.NewBatch()
		if err := b.Set(formatKey, binary.AppendUvarint(nil, formatVersion), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("persistence/pebble: write format version: %w", err)
		}
		// A new store: every session it will hold gets its work mark with
		// its appends, so its work index is complete from the start.
		if err := b.Set(workCompleteKey, nil, nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("persistence/pebble: mark the work index complete: %w", err)
		}
		return s.commit(b)
	}
	if err != nil {
		return fmt.Errorf("persistence/pebble: read format version: %w", err)
	}
	defer closer.Close()
	version, n := binary.Uvarint(v)
	if n <= 0 || n != len(v) {
		return fmt.Errorf("%w: %s: value %x is not a uvarint", persistence.ErrCorrupt, describeKey(formatKey), v)
	}
	if version != formatVersion {
		return fmt.Errorf("persistence/pebble: store format version %d, this build reads version %d", version, formatVersion)
	}
	return nil
}

// Metrics returns Pebble's metrics, for benchmarks and operations (the WAL
// sync count is LogWriter.FsyncLatency's sample count).
func (s *Store) Metrics() (*pebbledb.Metrics, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	return s.db.Metrics(), nil
}

// Close implements persistence.Store.
func (s *Store) Close() error {
	s.life.Lock()
	if s.life.closed {
		s.life.Unlock()
		return nil
	}
	s.life.closed = true
	s.stop()
	if s.life.wedged {
		s.life.Unlock()
		// The committer recovered from the panic and commits nothing more
		// (it checks the failed state before each group); let it end, but do
		// not wait on anything that may touch Pebble.
		close(s.group.stop)
		return fmt.Errorf("persistence/pebble: not closing Pebble, whose commit pipeline is stuck after %v; reopen the directory from a new process", s.life.failure)
	}
	for s.life.active > 0 {
		s.life.idle.Wait()
	}
	s.life.Unlock()
	s.stopCommitter()
	// Flushed, the memtables need no WAL replay at the next open: a node
	// with a million sessions restarted from a graceful stop opened in
	// 830 ms without this, most of it replaying the WAL
	// (BenchmarkStartupWithAMillionIdleSessions). Everything acknowledged
	// is durable in the WAL already: a failed flush loses nothing, and the
	// next open replays the WAL.
	if s.failed() == nil {
		_ = s.db.Flush()
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("persistence/pebble: close: %w", err)
	}
	return nil
}

// enter registers a call in progress; it fails once the store is closed or
// failed. Every successful enter is paired with leave.
func (s *Store) enter() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.closed {
		return persistence.ErrClosed
	}
	if s.life.failure != nil {
		return s.life.failure
	}
	s.life.active++
	return nil
}

func (s *Store) leave() {
	s.life.Lock()
	s.life.active--
	if s.life.active == 0 {
		s.life.idle.Broadcast()
	}
	s.life.Unlock()
}

func (s *Store) failed() error {
	s.life.Lock()
	defer s.life.Unlock()
	return s.life.failure
}

// stopErr is what a Wait woken by stop returns.
func (s *Store) stopErr() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.failure != nil {
		return s.life.failure
	}
	return persistence.ErrClosed
}

func (s *Store) stop() { s.stopOnce.Do(func() { close(s.stopped) }) }

// fail records the first failure and wakes waiters; it returns cause
// wrapped in persistence.ErrFailed.
func (s *Store) fail(cause error, wedged bool) error {
	err := fmt.Errorf("%w: %w", persistence.ErrFailed, cause)
	s.life.Lock()
	if s.life.failure == nil {
		s.life.failure = err
	}
	s.life.wedged = s.life.wedged || wedged
	s.life.Unlock()
	s.stop()
	return err
}

// fatalLogger passes Pebble's log lines to a Logger, but turns Fatalf, which
// Pebble calls when a commit fails, into a panic that commit recovers.
type fatalLogger struct{ pebbledb.Logger }

// fatalError is the panic value of fatalLogger.Fatalf. It keeps the first
// error among Fatalf's arguments, so that callers can match the I/O error
// with errors.Is.
type fatalError struct {
	msg   string
	cause error
}

func (f fatalError) Error() string { return f.msg }
func (f fatalError) Unwrap() error { return f.cause }

func (l fatalLogger) Fatalf(format string, args ...any) {
	f := fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			f.cause = err
			break
		}
	}
	l.Errorf("%s", f.msg)
	panic(f)
}

// SlogLogger routes Pebble's log lines to l: errors as errors, the rest at
// debug level (a Fatalf becomes a panic, as Open's Logger does with every
// Logger).
func SlogLogger(l *slog.Logger) pebbledb.Logger { return slogLogger{l} }

type slogLogger struct{ l *slog.Logger }

func (p slogLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}
func (p slogLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}
func (p slogLogger) Fatalf(format string, args ...any) {
	panic("pebble: fatal: " + fmt.Sprintf(format, args...))
}
