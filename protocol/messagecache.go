package protocol

// MessageCache keeps a value computed from each settled message of a
// transcript (any message but the active response: AIState.
// IsActiveResponse), so that a computation over the whole transcript at
// every model step (a prompt's conversion, its size for the compaction
// estimate) redoes only the messages that are new or still written to. A
// settled message never changes again: the random sessions' check
// (fuzz_test.go, stillSettled) holds every fold to it.
//
// The cache holds one slot per position of the last Update: a transcript
// grows at its end, so a step finds its messages where the last one saw
// them; a message that moved (after a compaction, say) is computed again.
// A message is identified by its ID, its parts (the first one's address and
// their count: a message's parts after a compaction part are a shorter
// view of it) and its metadata's size. The zero value is empty; it is not
// safe for concurrent use.
type MessageCache[T any] struct {
	slots []messageSlot[T]
	// stable is how many leading slots the last Update kept as they were.
	stable int
}

type messageSlot[T any] struct {
	id      string
	first   *Part
	parts   int
	meta    int
	settled bool
	value   T
}

// Update makes the cache's slots those of messages: At(i) is then
// compute(&messages[i]), computed now unless the slot already held it for
// the same settled message. settled says whether a message may be kept.
// An error of compute leaves the cache without that message and is
// returned.
func (c *MessageCache[T]) Update(messages []TranscriptMessage, settled func(id string) bool, compute func(*TranscriptMessage) (T, error)) error {
	if cap(c.slots) < len(messages) {
		grown := make([]messageSlot[T], len(messages), len(messages)+len(messages)/4+8)
		copy(grown, c.slots)
		c.slots = grown
	} else {
		if len(messages) < len(c.slots) {
			clear(c.slots[len(messages):]) // what the last update had beyond this one's end
		}
		c.slots = c.slots[:len(messages)] // slots past the old end were cleared
	}
	c.stable = len(messages)
	for i := range messages {
		m := &messages[i]
		k := messageSlot[T]{id: m.ID, parts: len(m.Parts), meta: len(m.Metadata)}
		if len(m.Parts) > 0 {
			k.first = &m.Parts[0]
		}
		s := &c.slots[i]
		if s.settled && s.id == k.id && s.first == k.first && s.parts == k.parts && s.meta == k.meta {
			continue
		}
		c.stable = min(c.stable, i)
		v, err := compute(m)
		if err != nil {
			c.slots = c.slots[:i]
			return err
		}
		k.value, k.settled = v, settled(m.ID)
		*s = k
	}
	return nil
}

// Len is the number of messages of the last Update.
func (c *MessageCache[T]) Len() int { return len(c.slots) }

// At is message i's value of the last Update.
func (c *MessageCache[T]) At(i int) T { return c.slots[i].value }

// Settled says whether message i of the last Update was settled.
func (c *MessageCache[T]) Settled(i int) bool { return c.slots[i].settled }

// Stable is how many leading messages the last Update found as the Update
// before it left them: settled, the same, at the same place, with the
// same values. A caller that keeps something built from the values of the
// first slots keeps what it built from the first Stable ones.
func (c *MessageCache[T]) Stable() int { return c.stable }
