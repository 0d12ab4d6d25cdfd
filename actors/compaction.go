package actors

import (
	"context"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/protocol"
)

// CompactionContext is what a custom compaction policy sees before a model
// step (R-COMPACT-13).
type CompactionContext struct {
	SessionID    string
	GenerationID string
	// Model is the resolved model ID of the step.
	Model string
	// Messages are the typed messages of the model context: the summary in
	// force (as its summary message, ID "summary-" + generation) first,
	// then the transcript after it.
	Messages []protocol.TranscriptMessage
	// ModelMessages is the model-ready prompt of the step, summary included.
	ModelMessages []harness.ModelMessage
	// InputTokens is A2's calibrated estimate of the prompt's input tokens.
	InputTokens int64
	// State is the session's application state at the prompt frontier.
	State any
}

// CustomCompaction is an application's own compaction policy: before each
// model step ShouldCompact decides, and Compact writes the summary, which
// A2 records (ai.compaction.requested / completed and the compaction part)
// exactly like an automatic one. Both run at least once per decision: a
// recovered step asks again. A compaction never splits a tool call from
// its result: while one is unsettled the policy is not asked.
type CustomCompaction struct {
	ShouldCompact func(context.Context, CompactionContext) (bool, error)
	Compact       func(context.Context, CompactionContext) (string, error)
}

// CompactionChoice is what a compaction resolver returns for one
// generation (R-COMPACT-14): automatic Options (Options.Disabled is
// false, turning compaction off), or a Custom policy.
type CompactionChoice struct {
	Options protocol.CompactionOptions
	Custom  *CustomCompaction
}

// validate checks a choice, statically at construction or after a resolver
// returned it (R-COMPACT-15), against the generation settings it runs with
// (R-COMPACT-17).
func (c CompactionChoice) validate(gs harness.GenerationSettings) error {
	if err := c.Options.Validate(); err != nil {
		return err
	}
	if c.Custom != nil {
		if c.Options != (protocol.CompactionOptions{}) {
			return &protocol.ConfigError{Option: "harness.compaction", Message: "a custom policy takes no automatic options (thresholdTokens, instructions, false)"}
		}
		if c.Custom.ShouldCompact == nil || c.Custom.Compact == nil {
			return &protocol.ConfigError{Option: "harness.compaction", Message: "a custom policy needs both ShouldCompact and Compact"}
		}
		return nil
	}
	if !c.Options.Disabled && c.Options.ThresholdTokens == 0 {
		if _, ok := gs.ProviderOptions["gateway"]["models"]; ok {
			return &protocol.ConfigError{Option: "harness.compaction.thresholdTokens",
				Message: "a Gateway fallback model list needs an explicit thresholdTokens that fits every model in the list (R-COMPACT-16)"}
		}
	}
	if c.explicitAutomatic() {
		if why := gs.ImplicitCompactionSkip(); why != "" {
			return &protocol.ConfigError{Option: "harness.compaction",
				Message: "automatic compaction cannot run with " + why + "; use a custom policy or false"}
		}
	}
	return nil
}

// explicitAutomatic reports whether the choice configures the automatic
// policy explicitly (a threshold or instructions) rather than implicitly.
func (c CompactionChoice) explicitAutomatic() bool {
	return c.Custom == nil && !c.Options.Disabled && (c.Options.ThresholdTokens != 0 || c.Options.Instructions != "")
}

// compactionFor resolves the compaction choice of one generation: the
// resolver runs once per generation (R-COMPACT-14), and its answer is
// validated before the generation runs (R-COMPACT-15).
func (a *Agent) compactionFor(ctx context.Context, rc harness.ResolverContext, gs harness.GenerationSettings) (CompactionChoice, error) {
	h := a.opts.Harness
	c := CompactionChoice{Options: h.Compaction, Custom: h.CustomCompaction}
	if h.CompactionFunc != nil {
		var err error
		if c, err = h.CompactionFunc(ctx, rc); err != nil {
			return c, err
		}
	}
	return c, c.validate(gs)
}
