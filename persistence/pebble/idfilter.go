package pebble

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// idFilter is an in-memory bloom filter of every event ID in the store, so
// that Append can tell a new ID is new without a Pebble lookup. Almost every
// ID an Append sees is new, and a Pebble Get that misses still builds an
// iterator over the memtables and every level: about 9 µs of CPU, which on
// two cores was the largest cost of an append after the fsync and cut the
// group-commit throughput at 64 writers to 0.7 of raw Pebble's
// (docs/benchmarks.md).
//
// It is exact in the direction that matters: every ID ever written is added
// (by a scan of the event-ID index that Open starts in the background, and
// by Append before it commits), and nothing is ever removed, so once the
// scan is done "absent" is always true. Until then (ready is false) Append
// looks every ID up. "Maybe present" (a stored ID, or a false positive,
// about 1% per layer) falls back to the Pebble lookup. A stale filter can
// only hold too much, never too little.
//
// The scan reads from a Pebble iterator opened after the filter exists, so
// an ID is either committed before the iterator (the scan sees it) or added
// by its Append (which adds before committing): none is missed.
//
// It is a scalable bloom filter: when the newest layer reaches its capacity
// a layer of twice the capacity is added, so memory stays at about
// bitsPerKey bits per ID (twice that at worst) however the store grows.
type idFilter struct {
	mu         sync.RWMutex
	seed       maphash.Seed
	bitsPerKey int
	layers     []*filterLayer
	ready      atomic.Bool // the scan of the stored IDs is complete
}

type filterLayer struct {
	bits     []uint64
	k        int // hash functions
	capacity int
	count    int
}

// idFilterFirstLayer is the capacity of the first layer for the IDs
// appended after Open: 1.25 MiB at 10 bits per key. Every layer adds its
// false-positive rate (about 1%) to the filter's, full or not, so many
// small layers cost lookups for nothing: from 4,096 IDs, 300,000 appended
// IDs took 7 layers and 5% of new IDs to a Pebble lookup, 4,000,000 took
// 10 layers and 8%; from a million, one layer and almost none for 300,000,
// 3 layers and 1.7% for 4,000,000 (TestIDFilterFirstLayer).
const idFilterFirstLayer = 1 << 20

// newIDFilter returns an empty filter whose first layer holds capacity IDs
// (at least 4,096).
func newIDFilter(bitsPerKey, capacity int) *idFilter {
	f := &idFilter{seed: maphash.MakeSeed(), bitsPerKey: bitsPerKey}
	f.addLayer(max(capacity, 1<<12))
	return f
}

func (f *idFilter) addLayer(capacity int) {
	f.layers = append(f.layers, newLayer(f.bitsPerKey, capacity))
}

func newLayer(bitsPerKey, capacity int) *filterLayer {
	m := capacity * bitsPerKey
	// k = bits per key × ln 2 minimises the false-positive rate.
	k := max(1, bitsPerKey*69/100)
	return &filterLayer{bits: make([]uint64, (m+63)/64), k: k, capacity: capacity}
}

// hashes returns the two halves used for double hashing.
func (f *idFilter) hashes(id string) (uint32, uint32) {
	return split(maphash.String(f.seed, id))
}

// hashesOf is hashes for an ID held in bytes; it hashes the same.
func (f *idFilter) hashesOf(id []byte) (uint32, uint32) {
	return split(maphash.Bytes(f.seed, id))
}

func split(h uint64) (uint32, uint32) { return uint32(h), uint32(h>>32) | 1 }

// set sets the k bits of a key with hashes h1, h2.
func (l *filterLayer) set(h1, h2 uint32) {
	m := uint32(len(l.bits) * 64)
	for i := range uint32(l.k) {
		bit := (h1 + i*h2) % m
		l.bits[bit/64] |= 1 << (bit % 64)
	}
}

// has reports whether all k bits of a key with hashes h1, h2 are set.
func (l *filterLayer) has(h1, h2 uint32) bool {
	m := uint32(len(l.bits) * 64)
	for i := range uint32(l.k) {
		bit := (h1 + i*h2) % m
		if l.bits[bit/64]&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

// addScanned adds the IDs found by the scan, given as their hashes, in a
// layer of their own sized for twice their number, and marks the filter
// ready.
func (f *idFilter) addScanned(hashes [][2]uint32) {
	l := newLayer(f.bitsPerKey, max(2*len(hashes), 1<<12))
	for _, h := range hashes {
		l.set(h[0], h[1])
	}
	l.count = len(hashes)
	l.capacity = l.count // full: later IDs go to the live layers
	f.mu.Lock()
	f.layers = append([]*filterLayer{l}, f.layers...)
	f.mu.Unlock()
	f.ready.Store(true)
}

// add records id as stored.
func (f *idFilter) add(id string) {
	h1, h2 := f.hashes(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.layers[len(f.layers)-1]
	if l.count >= l.capacity {
		f.addLayer(l.capacity * 2)
		l = f.layers[len(f.layers)-1]
	}
	l.set(h1, h2)
	l.count++
}

// mayContain reports whether id may be stored; false means it is not.
func (f *idFilter) mayContain(id string) bool {
	h1, h2 := f.hashes(id)
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, l := range f.layers {
		if l.has(h1, h2) {
			return true
		}
	}
	return false
}
