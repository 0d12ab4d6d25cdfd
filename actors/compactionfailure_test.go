// Summaries that cannot be used (empty, or not a summary) fail the
// generation that needed them.

package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/a2-runtime/a2/harness"
	"github.com/a2-runtime/a2/harness/script"
	"github.com/a2-runtime/a2/protocol"
)

// emptySummaries answers steps from a script and summary requests with
// nothing.
type emptySummaries struct{ answer harness.Model }

func (m emptySummaries) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == harness.ModelRoleUser && len(last.Content) > 0 && strings.HasPrefix(last.Content[0].Text, protocol.SummaryInstructions) {
		sc, _ := script.Parse([]byte(`{"default":{}}`))
		return script.New(sc).Stream(ctx, req)
	}
	return m.answer.Stream(ctx, req)
}

// R-COMPACT-08 R-COMPACT-06 R-COMPACT-31: an empty summary fails the
// generation, its compaction part settles failed, and the previous context
// stays in force.
func TestEmptySummaryFailsTheGeneration(t *testing.T) {
	sc, _ := script.Parse([]byte(`{"default":{"text":"` + longText + `"}}`))
	f := newFixture(t, `{}`, func(a *AgentOptions) {
		a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: 60}
		a.Models = func(string) (harness.Model, error) { return emptySummaries{answer: script.New(sc)}, nil }
	})
	for i := 0; i < 4; i++ {
		f.push("s1", protocol.Inputs.Text(fmt.Sprintf("m%d", i), "tell me more"))
		st := f.waitFor("s1", "turn settled", func(s *protocol.AIState) bool {
			return (idle(s) && len(s.Messages) == 2*(i+1)) || s.Status == protocol.StatusFailed
		})
		if st.Status != protocol.StatusFailed {
			continue
		}
		if st.Error == nil || !strings.Contains(st.Error.Message, "empty") {
			t.Fatalf("error %+v", st.Error)
		}
		var statuses []string
		for _, d := range compactionParts(st) {
			statuses = append(statuses, d.Status)
		}
		if len(statuses) != 1 || statuses[0] != protocol.CompactionStatusFailed {
			t.Fatalf("compaction parts %v", statuses)
		}
		return
	}
	t.Fatal("the prompt never crossed the threshold")
}

const longText = "a long answer that makes the prompt cross a small threshold quickly, again and again"

// badSummaries answers steps from a script and summary requests as kind
// says: a summary that also calls a tool, or a provider's context-limit
// error.
type badSummaries struct {
	answer harness.Model
	kind   string
}

func (m badSummaries) Stream(ctx context.Context, req harness.Request) (harness.Stream, error) {
	last := req.Messages[len(req.Messages)-1]
	if !(last.Role == harness.ModelRoleUser && len(last.Content) > 0 && strings.HasPrefix(last.Content[0].Text, protocol.SummaryInstructions)) {
		return m.answer.Stream(ctx, req)
	}
	if m.kind == "context limit" {
		return nil, errors.New("provider: this model's maximum context length is 8192 tokens (context_length_exceeded)")
	}
	sc, _ := script.Parse([]byte(`{"default":{"text":"a summary that also calls a tool","toolCalls":[{"id":"s1","name":"lookup","input":{}}]}}`))
	return script.New(sc).Stream(ctx, req)
}

// R-COMPACT-08: a summary response that calls a tool, and a provider's
// context-limit error on the summary request, each fail the generation:
// the turn is failed with the cause, the compaction part settles failed,
// and no summary is recorded.
func TestBadSummariesFailTheGeneration(t *testing.T) {
	for _, tc := range []struct{ kind, want string }{
		{"tool call", "called a tool"},
		{"context limit", "context_length_exceeded"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			sc, _ := script.Parse([]byte(`{"default":{"text":"answer"}}`))
			f := newFixture(t, `{}`, func(a *AgentOptions) {
				a.Harness.Compaction = protocol.CompactionOptions{ThresholdTokens: 1}
				a.Models = func(string) (harness.Model, error) { return badSummaries{answer: script.New(sc), kind: tc.kind}, nil }
			})
			f.push("s1", protocol.Inputs.Text("m1", "a question that crosses a threshold of one token"))
			st := f.waitFor("s1", "the failure", func(s *protocol.AIState) bool { return s.Status == protocol.StatusFailed })
			if st.Error == nil || !strings.Contains(st.Error.Message, tc.want) {
				t.Fatalf("error %+v, want one naming %q", st.Error, tc.want)
			}
			parts := compactionParts(st)
			if len(parts) != 1 || parts[0].Status != protocol.CompactionStatusFailed || parts[0].Summary != "" {
				t.Fatalf("compaction parts %+v, want one failed without a summary", parts)
			}
		})
	}
}
