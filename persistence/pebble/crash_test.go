package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/a2-runtime/a2/internal/testutil"
	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/protocol"
)

// Crash tests: writers append concurrently to a store on Pebble's crashable
// in-memory filesystem while the test takes crash clones at random moments
// (vfs.MemFS.CrashClone keeps what was synced and, with a random
// probability, some of what was not). Each clone is opened as a restarted
// process would open it and checked against what was acknowledged before
// the clone began:
//   - every acknowledged batch is there, at its acknowledged indexes, byte
//     for byte;
//   - every event there belongs to a batch that was submitted, and every such
//     batch is there whole or not at all, in submission order;
//   - each log is contiguous from index 1, LastIndex agrees, Lookup finds
//     every event and nothing else;
//   - an acknowledged snapshot (or a later one) is there;
//   - the reopened store accepts appends.
// The next epoch continues on the last clone, so recovery of a recovered
// store is crashed again.
//
// Each seed fixes the writers' choices and the crash points (counted in
// acknowledged appends); goroutine scheduling still varies between runs.
// Replay one seed with A2_CRASH_SEED=<seed>.

const (
	crashSeeds          = 20
	crashEpochs         = 5
	crashClonesPerEpoch = 5 // 20 × 5 × 5 = 500 crash points
	crashSessions       = 6
)

func TestCrashRecovery(t *testing.T) {
	n := crashSeeds
	if raceEnabled {
		n = crashSeeds / 5
		t.Logf("race detector on: %d seeds (%d crash points) instead of %d", n, n*crashEpochs*crashClonesPerEpoch, crashSeeds)
	}
	seeds := seedList(t, "A2_CRASH_SEED", n, 0xc4a5)
	var total crashStats
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			st := runCrashSeed(t, seed)
			if st.points != crashEpochs*crashClonesPerEpoch {
				t.Fatalf("seed %d: %d crash points checked, want %d", seed, st.points, crashEpochs*crashClonesPerEpoch)
			}
			total.add(st)
		})
	}
	t.Logf("%d crash points over %d seeds: %d batches acknowledged; across all clones %d acknowledged batches checked, "+
		"%d unacknowledged batches found whole (in flight at the crash), %d unacknowledged batches absent",
		total.points, len(seeds), total.acked, total.ackedChecked, total.inFlightKept, total.inFlightLost)
}

// crashStats counts what the crash test exercised, to show it is not vacuous.
type crashStats struct {
	points, acked, ackedChecked, inFlightKept, inFlightLost int
}

func (c *crashStats) add(o crashStats) {
	c.points += o.points
	c.acked += o.acked
	c.ackedChecked += o.ackedChecked
	c.inFlightKept += o.inFlightKept
	c.inFlightLost += o.inFlightLost
}

// seedList returns the one seed named by the environment variable env, or
// n seeds derived from base.
func seedList(t *testing.T, env string, n int, base uint64) []uint64 {
	if v := os.Getenv(env); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q is not a seed: %v", env, v, err)
		}
		t.Logf("replaying seed %d from %s", seed, env)
		return []uint64{seed}
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = base*1000 + uint64(i)
	}
	return seeds
}

// crashModel is what the test knows about the store during one epoch.
type crashModel struct {
	mu sync.Mutex
	// durable is each session's log at the start of the epoch (read from the
	// recovered store, so known durable).
	durable map[string][]protocol.Event
	// submitted holds every batch submitted this epoch, by its first ID.
	submitted map[string]submittedBatch
	// acked holds each acknowledged batch's stored events, by first ID.
	acked map[string][]protocol.Event
	// snapshots holds the highest acknowledged snapshot index per session.
	snapshots map[string]uint64
	ackCount  int
	ackSignal chan struct{} // closed and replaced on every acknowledgement
}

type submittedBatch struct {
	session string
	events  []protocol.Event
}

// crashPoint is one crash clone and what was acknowledged before it began.
type crashPoint struct {
	fs        *vfs.MemFS
	acked     map[string][]protocol.Event
	snapshots map[string]uint64
	unsynced  int
}

func (m *crashModel) ack(first string, events []protocol.Event) {
	m.mu.Lock()
	m.acked[first] = events
	m.ackCount++
	close(m.ackSignal)
	m.ackSignal = make(chan struct{})
	m.mu.Unlock()
}

func runCrashSeed(t *testing.T, seed uint64) (stats crashStats) {
	defer func() {
		if t.Failed() {
			t.Logf("failed with seed %d; replay with A2_CRASH_SEED=%d go test -run TestCrashRecovery ./persistence/pebble", seed, seed)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 1))
	fs := vfs.NewCrashableMem()
	durable := map[string][]protocol.Event{}
	for epoch := range crashEpochs {
		model := &crashModel{
			durable:   durable,
			submitted: map[string]submittedBatch{},
			acked:     map[string][]protocol.Event{},
			snapshots: map[string]uint64{},
			ackSignal: make(chan struct{}),
		}
		s := openCrashStore(t, testutil.CrashSafe(fs))
		if err := checkRecovered(s, model, nil, nil); err != nil {
			t.Fatalf("seed %d epoch %d: store at the start of the epoch: %v", seed, epoch, err)
		}
		clones := crashEpoch(t, s, model, fs, rng, epoch)
		if err := s.Close(); err != nil {
			t.Fatalf("seed %d epoch %d: Close: %v", seed, epoch, err)
		}
		for c, cp := range clones {
			recovered := openCrashStore(t, testutil.CrashSafe(cp.fs))
			err := checkRecovered(recovered, model, &cp, &stats)
			if err == nil && c == len(clones)-1 {
				durable, err = readAll(recovered)
			}
			if cerr := recovered.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("Close: %w", cerr)
			}
			if err != nil {
				t.Fatalf("seed %d epoch %d crash point %d (unsynced data kept: %d%%): %v", seed, epoch, c, cp.unsynced, err)
			}
			stats.points++
		}
		stats.acked += len(model.acked)
		fs = clones[len(clones)-1].fs
	}
	return stats
}

func openCrashStore(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open("db", Options{
		FS:     fs,
		Logger: testLogger{t},
		// Small memtables make flushes and WAL rotations happen during the
		// epoch, so crashes also land around them.
		Tune: func(o *pebbledb.Options) { o.MemTableSize = 128 << 10 },
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// crashEpoch runs writers on s and returns crashClonesPerEpoch crash clones
// of fs taken while they run.
func crashEpoch(t *testing.T, s *Store, m *crashModel, fs *vfs.MemFS, rng *rand.Rand, epoch int) []crashPoint {
	writers := 2 + rng.IntN(4)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := crashWriter(ctx, s, m, wrng, fmt.Sprintf("e%d-w%d", epoch, w)); err != nil {
				errc <- fmt.Errorf("writer %d: %w", w, err)
			}
		}()
	}
	var clones []crashPoint
	for range crashClonesPerEpoch {
		// Crash after a random number of further acknowledgements: a clone
		// races with the appends in flight.
		m.mu.Lock()
		target := m.ackCount + rng.IntN(40)
		m.mu.Unlock()
		for {
			m.mu.Lock()
			n, signal := m.ackCount, m.ackSignal
			m.mu.Unlock()
			if n >= target {
				break
			}
			select {
			case <-signal:
			case err := <-errc:
				stop()
				t.Fatal(err)
			case <-time.After(10 * time.Second):
				stop()
				t.Fatal("writers made no progress for 10 s")
			}
		}
		cp := crashPoint{unsynced: []int{0, 0, 10, 50, 90}[rng.IntN(5)]}
		m.mu.Lock()
		cp.acked = make(map[string][]protocol.Event, len(m.acked))
		for k, v := range m.acked {
			cp.acked[k] = v
		}
		cp.snapshots = make(map[string]uint64, len(m.snapshots))
		for k, v := range m.snapshots {
			cp.snapshots[k] = v
		}
		m.mu.Unlock()
		cp.fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: cp.unsynced, RNG: rand.New(rand.NewPCG(rng.Uint64(), 2))})
		clones = append(clones, cp)
	}
	stop()
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	return clones
}

// crashWriter appends batches of 1 to 4 events to random sessions until ctx
// ends; now and then it resubmits an acknowledged batch (which must replay)
// or saves a snapshot.
func crashWriter(ctx context.Context, s *Store, m *crashModel, rng *rand.Rand, name string) error {
	var mine []string // first IDs of this writer's acknowledged batches
	for n := 0; ctx.Err() == nil; n++ {
		session := fmt.Sprintf("s%d", rng.IntN(crashSessions))
		switch roll := rng.IntN(20); {
		case roll == 0 && len(mine) > 0:
			first := mine[rng.IntN(len(mine))]
			m.mu.Lock()
			b, want := m.submitted[first], m.acked[first]
			m.mu.Unlock()
			got, err := s.Append(ctx, b.session, 0, b.events)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("resubmitting batch %s: %w", first, err)
			}
			if !sameEventList(got, want) {
				return fmt.Errorf("resubmitting batch %s replayed %v, want %v", first, got, want)
			}
			continue
		case roll == 1:
			last, err := s.LastIndex(ctx, session)
			if err == nil {
				err = s.SaveSnapshot(ctx, persistence.Snapshot{Session: session, Reducer: "r", Index: last, State: fmt.Appendf(nil, "%s@%d", session, last)})
			}
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			m.mu.Lock()
			m.snapshots[session] = max(m.snapshots[session], last)
			m.mu.Unlock()
			continue
		}
		batch := make([]protocol.Event, 1+rng.IntN(4))
		for i := range batch {
			id := fmt.Sprintf("%s-%d-%d", name, n, i)
			batch[i] = protocol.Event{ID: id, Type: "test.crash", Payload: fmt.Appendf(nil, `{"id":%q,"pad":%q}`, id, bytes.Repeat([]byte("x"), rng.IntN(300)))}
		}
		m.mu.Lock()
		m.submitted[batch[0].ID] = submittedBatch{session: session, events: batch}
		m.mu.Unlock()
		for ctx.Err() == nil {
			last, err := s.LastIndex(ctx, session)
			if err == nil {
				var got []protocol.Event
				got, err = s.Append(ctx, session, last, batch)
				if err == nil {
					m.ack(batch[0].ID, got)
					mine = append(mine, batch[0].ID)
					break
				}
			}
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, persistence.ErrIndexConflict) {
				return fmt.Errorf("append to %s: %w", session, err)
			}
		}
	}
	return nil
}

// checkRecovered checks a store opened on a crash clone (or, with cp nil,
// the store at the start of an epoch) against the model; see the comment at
// the top of this file.
func checkRecovered(s *Store, m *crashModel, cp *crashPoint, stats *crashStats) error {
	ctx := context.Background()
	logs, err := readAll(s)
	if err != nil {
		return err
	}
	batchOf := map[string]string{} // event ID -> first ID of its submitted batch
	for first, b := range m.submitted {
		for _, e := range b.events {
			batchOf[e.ID] = first
		}
	}
	seen := map[string]bool{}
	for session, log := range logs {
		durable := m.durable[session]
		if len(log) < len(durable) || !sameEventList(log[:len(durable)], durable) {
			return fmt.Errorf("session %s lost or changed events that were durable before the epoch", session)
		}
		for i := len(durable); i < len(log); {
			e := log[i]
			first, ok := batchOf[e.ID]
			if !ok {
				return fmt.Errorf("session %s index %d holds event %q, which was never submitted", session, e.Index, e.ID)
			}
			b := m.submitted[first]
			if b.session != session || e.ID != first {
				return fmt.Errorf("session %s index %d holds %q, not the start of its batch %q of session %s (partial batch)", session, e.Index, e.ID, first, b.session)
			}
			if len(log)-i < len(b.events) {
				return fmt.Errorf("session %s ends inside batch %q: %d of %d events (partial batch)", session, first, len(log)-i, len(b.events))
			}
			for j, want := range b.events {
				got := log[i+j]
				if got.ID != want.ID || got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) {
					return fmt.Errorf("session %s index %d holds %s, batch %q has %s there (partial or mixed batch)", session, got.Index, got.ID, first, want.ID)
				}
			}
			seen[first] = true
			i += len(b.events)
		}
		last, err := s.LastIndex(ctx, session)
		if err != nil || last != uint64(len(log)) {
			return fmt.Errorf("LastIndex(%s) = %d, %v; the log has %d events", session, last, err, len(log))
		}
	}
	if cp == nil {
		return nil
	}
	for first, want := range cp.acked {
		got := logs[want[0].Session]
		idx := want[0].Index
		if uint64(len(got)) < idx+uint64(len(want))-1 || !sameEventList(got[idx-1:idx-1+uint64(len(want))], want) {
			return fmt.Errorf("acknowledged batch %q (session %s, indexes %d..%d) is missing or changed after the crash",
				first, want[0].Session, idx, idx+uint64(len(want))-1)
		}
	}
	for first, b := range m.submitted {
		ids := make([]string, len(b.events))
		for i, e := range b.events {
			ids[i] = e.ID
		}
		found, err := s.Lookup(ctx, ids)
		if err != nil {
			return fmt.Errorf("Lookup of batch %q: %w", first, err)
		}
		if want := map[bool]int{true: len(ids), false: 0}[seen[first]]; len(found) != want {
			return fmt.Errorf("Lookup of batch %q found %d of its %d events; the logs hold %d", first, len(found), len(ids), want)
		}
		switch _, acked := cp.acked[first]; {
		case acked:
			stats.ackedChecked++
		case seen[first]:
			stats.inFlightKept++
		default:
			stats.inFlightLost++
		}
	}
	for session, idx := range cp.snapshots {
		snap, found, err := s.LoadSnapshot(ctx, session, "r")
		if err != nil || !found || snap.Index < idx || string(snap.State) != fmt.Sprintf("%s@%d", session, snap.Index) {
			return fmt.Errorf("acknowledged snapshot of %s at %d: found=%v index=%d state=%q, %v", session, idx, found, snap.Index, snap.State, err)
		}
	}
	// The recovered store takes appends.
	session := "after-crash"
	last, err := s.LastIndex(ctx, session)
	if err != nil {
		return err
	}
	if _, err := s.Append(ctx, session, last, []protocol.Event{{ID: fmt.Sprintf("after-crash-%d", last), Type: "test.crash", Payload: []byte(`{}`)}}); err != nil {
		return fmt.Errorf("append after recovery: %w", err)
	}
	return nil
}

// readAll reads every session's whole log.
func readAll(s *Store) (map[string][]protocol.Event, error) {
	ctx := context.Background()
	sessions, err := s.Sessions(ctx, "", 1<<20)
	if err != nil {
		return nil, fmt.Errorf("Sessions: %w", err)
	}
	logs := map[string][]protocol.Event{}
	for _, session := range sessions {
		log, err := s.Read(ctx, session, 0, 1<<30)
		if err != nil {
			return nil, fmt.Errorf("Read(%s): %w", session, err)
		}
		if len(log) == 0 {
			return nil, fmt.Errorf("session %s is listed but its log is empty", session)
		}
		logs[session] = log
	}
	return logs, nil
}

func sameEventList(a, b []protocol.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.Type != y.Type || !bytes.Equal(x.Payload, y.Payload) || x.Index != y.Index ||
			x.Session != y.Session || x.Time != y.Time || x.Cause != y.Cause {
			return false
		}
	}
	return true
}
