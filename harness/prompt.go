package harness

import (
	"sync"

	"github.com/a2-runtime/a2/protocol"
)

// PromptCache keeps what the settled messages of one session's transcript
// contribute to each model step's prompt: their model messages
// (ConvertToModelMessages) and their share of the compaction estimate
// (protocol.MessageBytes), in a protocol.MessageCache. A step then
// converts and measures only the messages that are new or still written
// to, so its cost follows what changed, not the conversation's length.
// The cache lives in memory only, with the session's actor: a new
// activation starts empty and fills at its first step. It is safe for
// concurrent use; its zero value is empty.
type PromptCache struct {
	mu      sync.Mutex
	cache   protocol.MessageCache[promptShare]
	context protocol.ContextCache
	// flat holds the model messages of the cache's first len(ends) slots,
	// all settled, one after the other: slot i's end in flat at ends[i],
	// and the sum of the slots' bytes through slot i at sums[i]. A prompt
	// is flat with the other slots' messages written after it, in flat's
	// spare capacity (then lent: see Prompt), or in a copy.
	flat []ModelMessage
	ends []int
	sums []int64
	// valid is how many of the first slots flat still holds as the cache
	// does: an Update while a prompt is lent may change slots flat keeps,
	// which the next prompt made in place then cuts.
	valid int
	// used is the end of the last prompt written in flat's capacity; lent
	// says its caller holds it still, and lease names that prompt.
	used  int
	lent  bool
	lease uint64
}

// ModelContext returns protocol.ModelContext(messages), looking only at
// the parts of the messages that are new or still written to
// (protocol.ContextCache); settled is as for Prompt.
func (c *PromptCache) ModelContext(messages []protocol.TranscriptMessage, settled func(id string) bool) (summary string, after []protocol.TranscriptMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.context.ModelContext(messages, settled)
}

type promptShare struct {
	bytes int64
	msgs  []ModelMessage
}

func sharePrompt(m *protocol.TranscriptMessage) (promptShare, error) {
	msgs, err := ConvertToModelMessages([]protocol.TranscriptMessage{*m})
	if err != nil {
		return promptShare{}, err
	}
	return promptShare{bytes: protocol.MessageBytes(*m), msgs: msgs}, nil
}

func noRelease() {}

// Prompt returns the model messages of messages and the sum of their
// protocol.MessageBytes: the same as ConvertToModelMessages(messages) and
// the messages' part of protocol.EstimateBytes. settled says whether a
// message may be kept (false for the active response, which later folds
// change). The model messages of settled messages are shared with later
// prompts: a provider must not change them.
//
// The prompt is lent: it shares the cache's memory, which no later Prompt
// writes until the caller calls release (once, when the step that reads
// the prompt has ended). A Prompt while one is lent makes a copy. So a
// step costs what changed since the step before, not a copy of the whole
// conversation. release is never nil.
func (c *PromptCache) Prompt(messages []protocol.TranscriptMessage, settled func(id string) bool) (_ []ModelMessage, _ int64, release func(), _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.cache.Update(messages, settled, sharePrompt)
	c.valid = min(c.valid, c.cache.Stable(), c.cache.Len())
	keep := min(len(c.ends), c.valid)
	end, total := 0, int64(0)
	if keep > 0 {
		end, total = c.ends[keep-1], c.sums[keep-1]
	}
	if c.lent {
		// flat is read by the lent prompt: copy what it holds of the
		// valid slots, then the rest.
		if err != nil {
			return nil, 0, noRelease, err
		}
		count := end
		for i := keep; i < c.cache.Len(); i++ {
			s := c.cache.At(i)
			total += s.bytes
			count += len(s.msgs)
		}
		if count == 0 {
			return nil, total, noRelease, nil
		}
		out := make([]ModelMessage, end, count)
		copy(out, c.flat[:end])
		for i := keep; i < c.cache.Len(); i++ {
			out = append(out, c.cache.At(i).msgs...)
		}
		return out, total, noRelease, nil
	}
	// What flat holds past the valid slots, and the last prompt's tail,
	// goes: no references are kept past the end.
	clear(c.flat[end:max(c.used, len(c.flat))])
	c.flat, c.ends, c.sums, c.used = c.flat[:end], c.ends[:keep], c.sums[:keep], end
	if err != nil {
		c.valid = keep
		return nil, 0, noRelease, err
	}
	for i := keep; i < c.cache.Len() && c.cache.Settled(i); i++ {
		s := c.cache.At(i)
		c.flat = append(c.flat, s.msgs...)
		total += s.bytes
		c.ends, c.sums = append(c.ends, len(c.flat)), append(c.sums, total)
	}
	c.valid = len(c.ends)
	out := c.flat
	for i := len(c.ends); i < c.cache.Len(); i++ {
		s := c.cache.At(i)
		total += s.bytes
		out = append(out, s.msgs...)
	}
	if len(out) == 0 {
		return nil, total, noRelease, nil
	}
	if len(out) > cap(c.flat) {
		// The tail did not fit: out is a copy of its own.
		return out[:len(out):len(out)], total, noRelease, nil
	}
	c.used, c.lent = len(out), true
	c.lease++
	lease := c.lease
	return out[:len(out):len(out)], total, func() {
		c.mu.Lock()
		if c.lease == lease {
			c.lent = false
		}
		c.mu.Unlock()
	}, nil
}
