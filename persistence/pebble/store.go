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
// Appends of different sessions run concurrently; Pebble's commit pipeline
// gathers the batches that arrive while a WAL sync is in progress and covers
// them all with the next sync, so concurrent sessions share syncs without any
// batching layer of ours (measured in docs/benchmarks.md).
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
	"context"
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
	"github.com/a2-runtime/a2/protocol"
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
	claims    *idClaims
	ids       *idFilter // nil when disabled

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

var (
	_ persistence.Store         = (*Store)(nil)
	_ persistence.AsyncAppender = (*Store)(nil)
)

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

// Append implements persistence.Store. The steps, all under the session's
// append lock: claim the batch's IDs; look them up (duplicates before the
// index check, OQ-36); compare expected with the cached last index; write the
// events, their ID-index entries and the session meta in one batch with a
// WAL sync; advance the acknowledged last index and wake waiters.
func (s *Store) Append(ctx context.Context, session string, expected uint64, events []protocol.Event) ([]protocol.Event, error) {
	p, result, err := s.prepareAppend(ctx, session, expected, events, persistence.AppendOptions{})
	if p == nil {
		return result, err
	}
	return p.finish(s.commit(p.b))
}

// AppendAsync implements persistence.AsyncAppender: Append's steps up to
// the commit run on the caller's goroutine, and done is called once with
// what Append would return, on the caller's goroutine when the append ends
// before the commit (an invalid batch, a resubmission, a conflict), else on
// the store's committer goroutine once the batch is durable or has failed.
// done must not block nor call the store.
//
// It spares the caller a goroutine that waits for the commit and is woken
// after it: the session actor hands the batch over and is told by the
// committer (docs/storage.md §2.3).
func (s *Store) AppendAsync(ctx context.Context, session string, expected uint64, events []protocol.Event, done func([]protocol.Event, error)) {
	p, result, err := s.prepareAppend(ctx, session, expected, events, persistence.AppendOptions{})
	if p == nil {
		done(result, err)
		return
	}
	s.commitAsync(p.b, func(err error) { done(p.finish(err)) })
}

// pendingAppend is an append ready to commit: its Pebble batch, and what
// Append holds until the commit ends (the store's activity count, the
// session's state and append lock, the IDs' claims).
type pendingAppend struct {
	s       *Store
	st      *sessionState
	session string
	ids     []string
	batch   []protocol.Event
	last    uint64
	newLast uint64
	b       *pebbledb.Batch
}

// prepareAppend runs Append's steps up to the commit. With a nil
// pendingAppend, the append has ended with result and err and holds
// nothing; else the caller commits p.b and calls p.finish with the result.
// opts.Work sets or clears the session's work mark in the same batch.
func (s *Store) prepareAppend(ctx context.Context, session string, expected uint64, events []protocol.Event, opts persistence.AppendOptions) (p *pendingAppend, result []protocol.Event, err error) {
	batch, err := persistence.PrepareBatch(session, events)
	if err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	st := s.sessions.acquire(session)
	st.appendMu.Lock()
	p = &pendingAppend{s: s, st: st, session: session, batch: batch}
	// Until the batch is handed to the committer, every return releases
	// what is held.
	release := func() {
		st.appendMu.Unlock()
		s.sessions.release(session, st)
		s.leave()
	}

	p.ids = make([]string, len(batch))
	for i := range batch {
		p.ids[i] = batch[i].ID
	}
	if err := s.claims.claim(ctx, p.ids); err != nil {
		release()
		return nil, nil, err
	}
	unclaimed := func(result []protocol.Event, err error) (*pendingAppend, []protocol.Event, error) {
		s.claims.unclaim(p.ids)
		release()
		return nil, result, err
	}
	// A failure may have happened while this call waited for its locks.
	if err := s.failed(); err != nil {
		return unclaimed(nil, err)
	}

	// Duplicates first: an identical resubmission replays whatever expected
	// is; a conflicting reuse fails whole.
	stored, err := s.storedByID(batch)
	if err != nil {
		return unclaimed(nil, err)
	}
	if stored != nil {
		return unclaimed(persistence.Resubmission(batch, stored))
	}

	if opts.Epoch != 0 {
		if err := s.checkEpoch(session, opts.Epoch); err != nil {
			return unclaimed(nil, err)
		}
	}
	p.last, err = s.loadLast(st, session)
	if err != nil {
		return unclaimed(nil, err)
	}
	if p.last != expected {
		return unclaimed(nil, fmt.Errorf("%w: session %q is at index %d, append expected %d", persistence.ErrIndexConflict, session, p.last, expected))
	}

	p.b = s.db.NewBatch()
	p.newLast, err = s.fillBatch(p.b, session, p.last, s.now().UnixMilli(), batch)
	if err == nil && opts.Work != nil {
		err = setWork(p.b, session, *opts.Work)
	}
	if err != nil {
		_ = p.b.Close()
		return unclaimed(nil, err)
	}
	// Into the filter before the commit, while the IDs are claimed: the next
	// batch with one of these IDs checks after the claim is released.
	if s.ids != nil {
		for _, id := range p.ids {
			s.ids.add(id)
		}
	}
	return p, nil, nil
}

// finish ends an append whose commit returned err: on success it advances
// the session's acknowledged last index (waking waiters and followers);
// then it releases what prepareAppend holds, in the reverse order.
func (p *pendingAppend) finish(err error) ([]protocol.Event, error) {
	s := p.s
	if err == nil {
		p.st.advance(p.newLast, p.batch)
	}
	s.claims.unclaim(p.ids)
	p.st.appendMu.Unlock()
	s.sessions.release(p.session, p.st)
	s.leave()
	if err != nil {
		return nil, fmt.Errorf("append to session %q at indexes %d..%d: %w", p.session, p.last+1, p.newLast, err)
	}
	return p.batch, nil
}

// fillBatch assigns indexes after last and the time now to the events of
// batch and writes them into b: for each event its log record and its
// event-ID index entry, then the session meta. It returns the new last index.
func (s *Store) fillBatch(b *pebbledb.Batch, session string, last uint64, now int64, batch []protocol.Event) (uint64, error) {
	var scratch []byte
	key := logPrefix(session)
	prefix := len(key)
	for i := range batch {
		e := &batch[i]
		e.Index, e.Time = last+1+uint64(i), now
		// Encoded in place: no copy of the payload besides the batch's.
		key = binary.BigEndian.AppendUint64(key[:prefix], e.Index)
		op := b.SetDeferred(len(key), eventSize(e))
		copy(op.Key, key)
		if n := len(encodeEvent(op.Value[:0], e)); n != len(op.Value) {
			return 0, fmt.Errorf("persistence/pebble: event %q encoded to %d bytes, sized %d", e.ID, n, len(op.Value))
		}
		if err := op.Finish(); err != nil {
			return 0, fmt.Errorf("persistence/pebble: batch: %w", err)
		}
		scratch = encodeRef(scratch[:0], session, e.Index)
		if err := b.Set(idKey(e.ID), scratch, nil); err != nil {
			return 0, fmt.Errorf("persistence/pebble: batch: %w", err)
		}
	}
	newLast := last + uint64(len(batch))
	if err := b.Set(metaKey(session), encodeMeta(scratch[:0], newLast), nil); err != nil {
		return 0, fmt.Errorf("persistence/pebble: batch: %w", err)
	}
	return newLast, nil
}

// storedByID returns, for each event of batch, the stored event with its ID
// or nil; it returns a nil slice when no ID of the batch is stored.
func (s *Store) storedByID(batch []protocol.Event) ([]*protocol.Event, error) {
	var stored []*protocol.Event
	for i := range batch {
		if s.ids != nil && s.ids.ready.Load() && !s.ids.mayContain(batch[i].ID) {
			continue // certainly new
		}
		e, found, err := s.getByID(batch[i].ID)
		if err != nil {
			return nil, err
		}
		if found {
			if stored == nil {
				stored = make([]*protocol.Event, len(batch))
			}
			stored[i] = &e
		}
	}
	return stored, nil
}

// getByID reads the event with id through the global event-ID index.
func (s *Store) getByID(id string) (protocol.Event, bool, error) {
	key := idKey(id)
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return protocol.Event{}, false, nil
	}
	if err != nil {
		return protocol.Event{}, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	ref, err := decodeRef(v)
	closer.Close()
	if err != nil {
		return protocol.Event{}, false, corrupt(key, err)
	}
	e, found, err := s.getEvent(ref.session, ref.index)
	if err != nil {
		return protocol.Event{}, false, err
	}
	if !found {
		return protocol.Event{}, false, corrupt(key, fmt.Errorf("points to session %q index %d, which is not stored", ref.session, ref.index))
	}
	if e.ID != id {
		return protocol.Event{}, false, corrupt(key, fmt.Errorf("points to session %q index %d, which holds event %q", ref.session, ref.index, e.ID))
	}
	return e, true, nil
}

// getEvent reads the event at index of session.
func (s *Store) getEvent(session string, index uint64) (protocol.Event, bool, error) {
	key := logKey(session, index)
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return protocol.Event{}, false, nil
	}
	if err != nil {
		return protocol.Event{}, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	defer closer.Close()
	e, err := decodeEventAt(key, v, session, index)
	return e, err == nil, err
}

// decodeEventAt decodes the record stored under key and checks that it is
// the event the key names.
func decodeEventAt(key, v []byte, session string, index uint64) (protocol.Event, error) {
	e, err := decodeEvent(v)
	if err != nil {
		return protocol.Event{}, corrupt(key, err)
	}
	if e.Session != session || e.Index != index {
		return protocol.Event{}, corrupt(key, fmt.Errorf("record names session %q index %d", e.Session, e.Index))
	}
	return e, nil
}

func corrupt(key []byte, err error) error {
	return fmt.Errorf("%w: %s: %w", persistence.ErrCorrupt, describeKey(key), err)
}

// loadLast returns the acknowledged last index of session, reading it from
// the meta key the first time. The caller holds st.appendMu, so no write of
// the session is in flight and what Pebble holds is durable.
func (s *Store) loadLast(st *sessionState, session string) (uint64, error) {
	st.mu.Lock()
	loaded, last := st.loaded, st.last
	st.mu.Unlock()
	if loaded {
		return last, nil
	}
	key := metaKey(session)
	v, closer, err := s.db.Get(key)
	switch {
	case errors.Is(err, pebbledb.ErrNotFound):
		last = 0
	case err != nil:
		return 0, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	default:
		last, err = decodeMeta(v)
		closer.Close()
		if err != nil {
			return 0, corrupt(key, err)
		}
	}
	st.mu.Lock()
	st.loaded, st.last = true, last
	st.mu.Unlock()
	return last, nil
}

// watermark returns the acknowledged last index of session: every event up
// to it is durable, and none after it is acknowledged.
func (s *Store) watermark(st *sessionState, session string) (uint64, error) {
	st.mu.Lock()
	loaded, last := st.loaded, st.last
	st.mu.Unlock()
	if loaded {
		return last, nil
	}
	st.appendMu.Lock()
	defer st.appendMu.Unlock()
	return s.loadLast(st, session)
}

// durableLast is watermark for a session the caller has not acquired.
func (s *Store) durableLast(session string) (uint64, error) {
	st := s.sessions.acquire(session)
	defer s.sessions.release(session, st)
	return s.watermark(st, session)
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
	var out []protocol.Event
	for i, id := range ids {
		if i%256 == 255 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if id == "" {
			continue
		}
		e, found, err := s.getByID(id)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		last, err := s.durableLast(e.Session)
		if err != nil {
			return nil, err
		}
		if e.Index <= last {
			out = append(out, e)
		}
	}
	return out, nil
}

// Read implements persistence.Store. It scans the session's log keys from
// after+1 up to the acknowledged last index, and reports a gap or a record
// that contradicts its key as ErrCorrupt.
func (s *Store) Read(ctx context.Context, session string, after uint64, limit int) ([]protocol.Event, error) {
	if err := persistence.CheckRead(ctx, session, limit); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	last, err := s.durableLast(session)
	if err != nil {
		return nil, err
	}
	if limit == 0 || after >= last {
		return nil, nil
	}
	hi := last
	if uint64(limit) < last-after {
		hi = after + uint64(limit)
	}
	iter, err := s.db.NewIter(&pebbledb.IterOptions{
		LowerBound: logKey(session, after+1),
		UpperBound: logKey(session, hi+1),
	})
	if err != nil {
		return nil, fmt.Errorf("persistence/pebble: read session %q: %w", session, err)
	}
	out, err := readLog(ctx, iter, session, after+1, hi)
	if cerr := iter.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("persistence/pebble: read session %q: %w", session, cerr)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readLog collects the events lo..hi of session from iter, which is bounded
// to exactly those keys.
func readLog(ctx context.Context, iter *pebbledb.Iterator, session string, lo, hi uint64) ([]protocol.Event, error) {
	out := make([]protocol.Event, 0, min(hi-lo+1, 1024))
	prefixLen := len(logPrefix(session))
	next := lo
	for valid := iter.First(); valid; valid = iter.Next() {
		if (next-lo)%256 == 255 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		key := iter.Key()
		index, err := keyIndex(key, prefixLen)
		if err != nil {
			return nil, corrupt(key, err)
		}
		if index != next {
			return nil, corrupt(key, fmt.Errorf("log of session %q skips from index %d to %d", session, next-1, index))
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
		}
		e, err := decodeEventAt(key, v, session, index)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		next++
	}
	if err := iter.Error(); err != nil {
		return nil, fmt.Errorf("persistence/pebble: read session %q: %w", session, err)
	}
	if next != hi+1 {
		return nil, fmt.Errorf("%w: %s: log of session %q ends at index %d, its last index is %d",
			persistence.ErrCorrupt, describeKey(logKey(session, next)), session, next-1, hi)
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
	return s.durableLast(session)
}

// Wait implements persistence.Store. The acknowledged last index and the
// channel closed at its next advance are read together under the session's
// lock, so an append between the check and the wait still wakes the waiter.
func (s *Store) Wait(ctx context.Context, session string, after uint64) (uint64, error) {
	if err := persistence.CheckSession(session); err != nil {
		return 0, err
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	st := s.sessions.acquire(session)
	defer s.sessions.release(session, st)
	_, err := s.watermark(st, session)
	s.leave() // the blocking part below touches no Pebble state
	if err != nil {
		return 0, err
	}
	for {
		st.mu.Lock()
		last, changed := st.last, st.changed
		st.mu.Unlock()
		if last > after {
			return last, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-s.stopped:
			return 0, s.stopErr()
		}
	}
}

// Sessions implements persistence.Store by scanning the meta keys, which
// hold bare session IDs in ascending order.
func (s *Store) Sessions(ctx context.Context, after string, limit int) ([]string, error) {
	return s.listSessions(ctx, tagMeta, after, limit, "sessions", s.sessions.firstAppendPending)
}

// listSessions lists the bare session IDs of the keys tagged tag (meta or
// work keys, which hold them in ascending order) strictly after after, at
// most limit, skipping those skip names.
func (s *Store) listSessions(ctx context.Context, tag byte, after string, limit int, what string, skip func(string) bool) ([]string, error) {
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
	lower := append(append([]byte{tag}, after...), 0) // the smallest key after after's
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: []byte{tag + 1}})
	if err != nil {
		return nil, fmt.Errorf("persistence/pebble: list %s: %w", what, err)
	}
	var out []string
	for valid := iter.First(); valid && len(out) < limit; valid = iter.Next() {
		session := string(iter.Key()[1:])
		if skip != nil && skip(session) {
			continue
		}
		out = append(out, session)
	}
	err = iter.Error()
	if cerr := iter.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("persistence/pebble: list %s: %w", what, err)
	}
	return out, nil
}

// SaveSnapshot implements persistence.Store. The snapshot and the deletion
// of those beyond the retention count commit in one synced batch.
func (s *Store) SaveSnapshot(ctx context.Context, snap persistence.Snapshot) error {
	if err := persistence.CheckSnapshot(ctx, snap.Session, snap.Reducer); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	st := s.sessions.acquire(snap.Session)
	defer s.sessions.release(snap.Session, st)
	st.snapMu.Lock()
	defer st.snapMu.Unlock()

	prefix := snapshotPrefix(snap.Session, snap.Reducer)
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("persistence/pebble: save snapshot: %w", err)
	}
	// Walk the existing snapshots from the newest; the new one takes its
	// place in that order, and whatever falls past the retention count is
	// deleted.
	b := s.db.NewBatch()
	kept, placed, keepNew := 0, false, false
	place := func() {
		placed = true
		if kept < s.retention {
			keepNew = true
			kept++
		}
	}
	for valid := iter.Last(); valid; valid = iter.Prev() {
		index, err := keyIndex(iter.Key(), len(prefix))
		if err != nil {
			err = corrupt(iter.Key(), err)
			_ = iter.Close()
			_ = b.Close()
			return err
		}
		if !placed && snap.Index >= index {
			place()
			if snap.Index == index && keepNew {
				continue // overwritten by the Set below
			}
		}
		if kept < s.retention {
			kept++
			continue
		}
		if err := b.Delete(iter.Key(), nil); err != nil {
			_ = iter.Close()
			_ = b.Close()
			return fmt.Errorf("persistence/pebble: save snapshot: %w", err)
		}
	}
	if !placed {
		place()
	}
	err = iter.Error()
	if cerr := iter.Close(); err == nil {
		err = cerr
	}
	if err == nil && keepNew {
		err = b.Set(snapshotKey(snap.Session, snap.Reducer, snap.Index), encodeSnapshot(nil, &snap), nil)
	}
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("persistence/pebble: save snapshot: %w", err)
	}
	if b.Empty() {
		return b.Close()
	}
	if err := s.commit(b); err != nil {
		return fmt.Errorf("save snapshot of session %q reducer %q at index %d: %w", snap.Session, snap.Reducer, snap.Index, err)
	}
	return nil
}

// LoadSnapshot implements persistence.Store: the last key of the
// (session, reducer) prefix is the snapshot with the highest index.
func (s *Store) LoadSnapshot(ctx context.Context, session, reducer string) (persistence.Snapshot, bool, error) {
	if err := persistence.CheckSnapshot(ctx, session, reducer); err != nil {
		return persistence.Snapshot{}, false, err
	}
	if err := s.enter(); err != nil {
		return persistence.Snapshot{}, false, err
	}
	defer s.leave()
	prefix := snapshotPrefix(session, reducer)
	iter, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return persistence.Snapshot{}, false, fmt.Errorf("persistence/pebble: load snapshot: %w", err)
	}
	defer iter.Close()
	if !iter.Last() {
		if err := iter.Error(); err != nil {
			return persistence.Snapshot{}, false, fmt.Errorf("persistence/pebble: load snapshot: %w", err)
		}
		return persistence.Snapshot{}, false, nil
	}
	key := iter.Key()
	index, err := keyIndex(key, len(prefix))
	if err != nil {
		return persistence.Snapshot{}, false, corrupt(key, err)
	}
	v, err := iter.ValueAndErr()
	if err != nil {
		return persistence.Snapshot{}, false, fmt.Errorf("persistence/pebble: read %s: %w", describeKey(key), err)
	}
	snap, err := decodeSnapshot(v)
	if err != nil {
		return persistence.Snapshot{}, false, corrupt(key, err)
	}
	if snap.Session != session || snap.Reducer != reducer || snap.Index != index {
		return persistence.Snapshot{}, false, corrupt(key, fmt.Errorf("record names session %q reducer %q index %d", snap.Session, snap.Reducer, snap.Index))
	}
	return snap, true, nil
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
