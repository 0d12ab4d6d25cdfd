package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Group commit.
//
// Every append joins a queue; a committer takes what is queued (up to
// maxGroupAppends batches and maxGroupBytes of payload) and writes it with
// one statement, SELECT a2_append_group(...) (migration 6), which is one round
// trip, one transaction and one WAL flush for all of them. The function
// answers each batch on its own: written, index conflict, lease lost, or
// stored IDs (then the batch's IDs are looked up and
// persistence.Resubmission decides, exactly as for a single append). At
// most Options.Committers groups are in flight at once; an append that
// arrives while they are all busy waits for the next group, which is how
// appends of many sessions come to share a commit. Under load (the last
// group held lingerAfter batches or more), a committer also waits until
// its oldest append has queued for Options.GroupLinger before it takes
// the group: PostgreSQL spends about as much CPU on a transaction's start
// and end as on the rows of a group, so on a loaded server (where a
// commit takes milliseconds anyway) fewer, larger groups leave more CPU
// to everything else; a lone append never waits (docs/benchmarks.md,
// "A group's linger").
//
// A statement that fails as a whole (an error of one batch that the
// function does not answer, such as an event ID too long for the index)
// writes nothing; its batches are written again one group each, so that
// the error is the offending batch's alone. A deadlock or serialization
// failure is retried. A failure whose outcome is unknown (the connection
// lost after the statement was sent) is persistence.ErrFailed for every
// batch of the group: resubmit, which replays what landed.

const (
	// maxGroupAppends and maxGroupBytes bound one group.
	maxGroupAppends = 256
	maxGroupBytes   = 4 << 20
	// defaultCommitters is how many groups may be in flight at once.
	defaultCommitters = 2
	// defaultGroupLinger is Options.GroupLinger's default, and lingerAfter
	// the size of the last group from which a committer lingers.
	defaultGroupLinger = 5 * time.Millisecond
	lingerAfter        = 4
)

// Statuses of a2_append_group's rows.
const (
	statusWritten   = 0
	statusConflict  = 1
	statusLeaseLost = 2
	statusStored    = 3
)

// pendingAppend is one append waiting for its group.
type pendingAppend struct {
	ctx      context.Context
	session  string
	expected uint64
	batch    []protocol.Event // prepared: Session set, Index and Time to assign
	opts     persistence.AppendOptions
	done     func([]protocol.Event, error)
	bytes    int
	queued   time.Time
}

// committer queues appends and runs groups.
type committer struct {
	mu      sync.Mutex
	queue   []*pendingAppend
	running int // groups in flight
	max     int
	linger  time.Duration
	last    int // batches in the last group taken
	// statements counts the a2_append_group statements run, and batches the
	// batches they carried (tests read them: appends per commit).
	statements, batches atomic.Int64
}

// appendAsync is an append that joins the next group; done is called when
// the group has committed (or the append has failed).
func (s *Store) appendAsync(ctx context.Context, session string, expected uint64, events []protocol.Event, opts persistence.AppendOptions, done func([]protocol.Event, error)) {
	batch, err := persistence.PrepareBatch(session, events)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = s.enter()
	}
	if err != nil {
		done(nil, err)
		return
	}
	p := &pendingAppend{ctx: ctx, session: session, expected: expected, batch: batch, opts: opts, queued: time.Now()}
	p.done = func(evs []protocol.Event, err error) {
		s.leave()
		done(evs, err)
	}
	for i := range batch {
		p.bytes += batch[i].Size()
	}
	c := &s.commit
	c.mu.Lock()
	c.queue = append(c.queue, p)
	start := c.running < c.max
	if start {
		c.running++
	}
	c.mu.Unlock()
	if start {
		go s.commitLoop()
	}
}

// appendWait is appendAsync that waits for its result.
func (s *Store) appendWait(ctx context.Context, session string, expected uint64, events []protocol.Event, opts persistence.AppendOptions) ([]protocol.Event, error) {
	type result struct {
		evs []protocol.Event
		err error
	}
	ch := make(chan result, 1)
	s.appendAsync(ctx, session, expected, events, opts, func(evs []protocol.Event, err error) { ch <- result{evs, err} })
	r := <-ch
	return r.evs, r.err
}

// commitLoop runs groups while appends are queued.
func (s *Store) commitLoop() {
	c := &s.commit
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			if wait := lingerFor(c.linger, c.last, len(c.queue), c.queue[0].queued, time.Now()); wait > 0 {
				c.mu.Unlock()
				time.Sleep(wait)
				c.mu.Lock()
			}
		}
		var group []*pendingAppend
		bytes, n := 0, 0
		for n < len(c.queue) && n < maxGroupAppends && (n == 0 || bytes+c.queue[n].bytes <= maxGroupBytes) {
			bytes += c.queue[n].bytes
			n++
		}
		group = slices.Clone(c.queue[:n])
		clear(c.queue[:n])
		c.queue = c.queue[n:]
		if len(c.queue) == 0 {
			c.queue = nil
		}
		if n == 0 {
			c.running--
			c.mu.Unlock()
			return
		}
		c.last = n
		c.mu.Unlock()
		s.runGroup(group)
	}
}

// lingerFor is how long a committer waits before it takes its next group
// from a queue of queued appends, the oldest queued at oldest, when the
// last group it took held last batches: until the oldest has waited linger,
// when the last group was busy and the queue has room.
func lingerFor(linger time.Duration, last, queued int, oldest, now time.Time) time.Duration {
	if linger <= 0 || last < lingerAfter || queued >= maxGroupAppends {
		return 0
	}
	return max(oldest.Add(linger).Sub(now), 0)
}

// runGroup writes a group and answers each of its appends.
func (s *Store) runGroup(group []*pendingAppend) {
	live := group[:0:0]
	for _, p := range group {
		if err := p.ctx.Err(); err != nil {
			p.done(nil, err)
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	// One lock order for every group: by session, then as queued.
	slices.SortStableFunc(live, func(a, b *pendingAppend) int { return cmp.Compare(a.session, b.session) })
	for attempt := 1; ; attempt++ {
		rows, err := s.writeGroup(live)
		if err == nil {
			for i, p := range live {
				s.answer(p, rows[i])
			}
			return
		}
		switch {
		case retryable(err) && attempt < maxAppendAttempts:
			continue
		case errors.Is(err, persistence.ErrFailed) || len(live) == 1:
			for _, p := range live {
				p.done(nil, describeFailure(p, err))
			}
			return
		default:
			// Nothing was written: give each batch a group of its own, so
			// that the error is the offending batch's alone.
			for _, p := range live {
				s.runGroup([]*pendingAppend{p})
			}
			return
		}
	}
}

// groupRow is a2_append_group's answer for one batch.
type groupRow struct {
	status int16
	last   int64
	epoch  int64
}

// writeGroup runs a2_append_group for the group: one statement (in a transaction
// of its own only when the BeforeCommit hook is set).
func (s *Store) writeGroup(group []*pendingAppend) ([]groupRow, error) {
	var total int
	for _, p := range group {
		total += len(p.batch)
	}
	sessions, expected, epochs := make([][]byte, len(group)), make([]int64, len(group)), make([]int64, len(group))
	work, counts := make([]int16, len(group)), make([]int32, len(group))
	ids, types, causes, payloads := make([][]byte, 0, total), make([][]byte, 0, total), make([][]byte, 0, total), make([][]byte, 0, total)
	batches := make([]int32, 0, total)
	for i, p := range group {
		sessions[i], expected[i], epochs[i], counts[i] = []byte(p.session), int64(p.expected), int64(p.opts.Epoch), int32(len(p.batch))
		work[i] = -1
		if p.opts.Work != nil {
			work[i] = 0
			if *p.opts.Work {
				work[i] = 1
			}
		}
		for j := range p.batch {
			e := &p.batch[j]
			payload := []byte(e.Payload)
			if payload == nil {
				payload = []byte{}
			}
			ids, types, causes, payloads = append(ids, []byte(e.ID)), append(types, []byte(e.Type)), append(causes, []byte(e.Cause)), append(payloads, payload)
			batches = append(batches, int32(i+1))
		}
	}
	now := s.now().UnixMilli()
	for _, p := range group {
		for j := range p.batch {
			p.batch[j].Time = now
		}
	}
	s.commit.statements.Add(1)
	s.commit.batches.Add(int64(len(group)))
	const query = `SELECT status, last, epoch FROM a2_append_group($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	args := []any{sessions, expected, epochs, work, counts, batches, ids, types, causes, payloads, now, s.tag}
	ctx := context.Background()
	if s.hook == nil {
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return nil, groupError(err)
		}
		out, err := collectGroup(rows, len(group))
		return out, groupError(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out, err := collectGroup(rows, len(group))
	if err != nil {
		return nil, err
	}
	for _, p := range group {
		if err := s.hook(ctx, p.session, tx.Conn().PgConn().PID()); err != nil {
			return nil, fmt.Errorf("BeforeCommit hook: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
			return nil, err
		}
		return nil, fmt.Errorf("%w: commit: %w", persistence.ErrFailed, err)
	}
	return out, nil
}

func collectGroup(rows pgx.Rows, n int) ([]groupRow, error) {
	out := make([]groupRow, 0, n)
	for rows.Next() {
		var r groupRow
		if err := rows.Scan(&r.status, &r.last, &r.epoch); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("a2_append_group answered %d rows for %d batches", len(out), n)
	}
	return out, nil
}

// groupError classifies a failed statement: an error the server answered
// (it rolled the statement back) or one before anything was sent leaves
// nothing written and is returned as it is; anything else (the connection
// lost while the statement ran, the server restarting) leaves the outcome
// unknown: persistence.ErrFailed.
func groupError(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
		return err
	}
	if pgconn.SafeToRetry(err) {
		return err
	}
	return fmt.Errorf("%w: %w", persistence.ErrFailed, err)
}

// describeFailure wraps a group's error for one of its appends.
func describeFailure(p *pendingAppend, err error) error {
	last := p.expected + uint64(len(p.batch))
	if errors.Is(err, persistence.ErrFailed) {
		if strings.HasPrefix(err.Error(), persistence.ErrFailed.Error()) {
			err = errors.Unwrap(err)
		}
		return fmt.Errorf("%w: append to session %q at indexes %d..%d: outcome unknown, resubmit the same batch: %w",
			persistence.ErrFailed, p.session, p.expected+1, last, err)
	}
	return fmt.Errorf("persistence/postgres: append to session %q at indexes %d..%d (nothing written): %w", p.session, p.expected+1, last, err)
}

// answer completes one append from its row of a2_append_group.
func (s *Store) answer(p *pendingAppend, r groupRow) {
	switch r.status {
	case statusWritten:
		for i := range p.batch {
			p.batch[i].Index = uint64(r.last) + 1 + uint64(i)
		}
		s.published(p.session, p.batch)
		p.done(p.batch, nil)
	case statusConflict:
		p.done(nil, fmt.Errorf("%w: session %q is at index %d, append expected %d", persistence.ErrIndexConflict, p.session, r.last, p.expected))
	case statusLeaseLost:
		p.done(nil, fmt.Errorf("%w: session %q is at ownership epoch %d, the append's is %d", persistence.ErrLeaseLost, p.session, r.epoch, p.opts.Epoch))
	case statusStored:
		p.done(s.resubmission(p))
	default:
		p.done(nil, fmt.Errorf("persistence/postgres: append to session %q: a2_append_group answered status %d", p.session, r.status))
	}
}

// resubmission decides the fate of a batch some of whose IDs are stored:
// the stored events when it is an identical resubmission, else
// ErrPartialDuplicateBatch.
func (s *Store) resubmission(p *pendingAppend) ([]protocol.Event, error) {
	ids := make([]string, len(p.batch))
	for i := range p.batch {
		ids[i] = p.batch[i].ID
	}
	found, err := s.lookup(p.ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("persistence/postgres: append to session %q: look up its stored IDs (nothing written): %w", p.session, err)
	}
	byID := make(map[string]*protocol.Event, len(found))
	for i := range found {
		byID[found[i].ID] = &found[i]
	}
	stored := make([]*protocol.Event, len(p.batch))
	for i := range p.batch {
		stored[i] = byID[p.batch[i].ID]
	}
	out, err := persistence.Resubmission(p.batch, stored)
	if err == nil && out == nil {
		// a2_append_group saw a stored ID that a lookup a moment later does not:
		// impossible while events are never deleted once committed.
		return nil, fmt.Errorf("persistence/postgres: append to session %q: an event ID was reported stored and then not found (nothing written)", p.session)
	}
	return out, err
}
