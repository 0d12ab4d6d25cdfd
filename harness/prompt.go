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
	// copies it in one piece, then adds the rest.
	flat []ModelMessage
	ends []int
	sums []int64
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

// Prompt returns the model messages of messages and the sum of their
// protocol.MessageBytes: the same as ConvertToModelMessages(messages) and
// the messages' part of protocol.EstimateBytes. settled says whether a
// message may be kept (false for the active response, which later folds
// change). The model messages of settled messages are shared with later
// prompts: a provider must not change them.
func (c *PromptCache) Prompt(messages []protocol.TranscriptMessage, settled func(id string) bool) ([]ModelMessage, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.cache.Update(messages, settled, sharePrompt)
	// What flat holds of slots the update changed (or dropped on an error)
	// goes.
	keep := min(len(c.ends), c.cache.Stable(), c.cache.Len())
	end, total := 0, int64(0)
	if keep > 0 {
		end, total = c.ends[keep-1], c.sums[keep-1]
	}
	clear(c.flat[end:]) // no references kept past the end
	c.flat, c.ends, c.sums = c.flat[:end], c.ends[:keep], c.sums[:keep]
	if err != nil {
		return nil, 0, err
	}
	for i := keep; i < c.cache.Len() && c.cache.Settled(i); i++ {
		s := c.cache.At(i)
		c.flat = append(c.flat, s.msgs...)
		total += s.bytes
		c.ends, c.sums = append(c.ends, len(c.flat)), append(c.sums, total)
	}
	count := len(c.flat)
	for i := len(c.ends); i < c.cache.Len(); i++ {
		s := c.cache.At(i)
		total += s.bytes
		count += len(s.msgs)
	}
	if count == 0 {
		return nil, total, nil
	}
	out := make([]ModelMessage, len(c.flat), count)
	copy(out, c.flat)
	for i := len(c.ends); i < c.cache.Len(); i++ {
		out = append(out, c.cache.At(i).msgs...)
	}
	return out, total, nil
}
