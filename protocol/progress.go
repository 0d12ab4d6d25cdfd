package protocol

// ProgressOptions are the durable batching options of model progress
// (R-PROGRESS-01..03): a batch is written as soon as the previous write
// finishes and holds at most MaxChunks chunks; MaxDelayMs lets a batch
// collect that long after the previous write, except that boundary chunks
// (IsBoundaryChunk) and a full batch write sooner. The zero value means the
// defaults.
type ProgressOptions struct {
	MaxChunks  int
	MaxDelayMs int
}

// Default progress options (R-PROGRESS-01).
const (
	DefaultMaxChunks  = 128
	DefaultMaxDelayMs = 0
)

// WithDefaults fills unset options with their defaults.
func (o ProgressOptions) WithDefaults() ProgressOptions {
	if o.MaxChunks == 0 {
		o.MaxChunks = DefaultMaxChunks
	}
	return o
}

// Validate checks the options at construction.
func (o ProgressOptions) Validate() error {
	if o.MaxChunks < 0 {
		return configErr("progress.maxChunks", "must be a positive integer, not %d", o.MaxChunks)
	}
	if o.MaxDelayMs < 0 {
		return configErr("progress.maxDelayMs", "must not be negative")
	}
	return nil
}
