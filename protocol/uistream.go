package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// UIStream turns the successive folded states of one response message into
// the AI SDK's UI message stream (version 7 chunks), so that a client
// building the message with readUIMessageStream or useChat arrives at the
// message A2 folded. It works on the message, not on the model's chunks:
// what A2's fold removed (a superseded attempt, a failed attempt that was
// retried, chunks past a Stop's lastSeenIndex) is taken back with a
// reset-step, and what A2 adds outside the model's stream (tool outputs,
// approvals, settled parts) is sent as its chunks. docs/http.md §Chat.
//
// A UIStream is pure: it holds the message as the client has it and no
// I/O. The zero value is not usable; call NewUIStream.
type UIStream struct {
	id      string
	started bool
	// sent is the message as the client rebuilt it from the chunks so far.
	sent UIMessage
	// broken is set when the message changed in a way chunks cannot show
	// (a part removed before the current step).
	broken bool
}

// NewUIStream returns the stream of response message id.
func NewUIStream(id string) *UIStream {
	return &UIStream{id: id, sent: UIMessage{ID: id, Role: RoleAssistant}}
}

// NewUIStreamFrom returns the stream of response message id for a client
// that has the message as from already (useChat continuing its copy of the
// response, as after it answered an approval): the chunks continue from
// there instead of rebuilding the message from its start.
func NewUIStreamFrom(id string, from *UIMessage) *UIStream {
	u := NewUIStream(id)
	if from != nil {
		u.sent.Metadata = from.Metadata
		for _, p := range from.Parts {
			u.sent.Parts = append(u.sent.Parts, clientView(p))
		}
	}
	return u
}

// Broken reports whether the response changed in a way the stream cannot
// show; the client should then read the session's state.
func (u *UIStream) Broken() bool { return u.broken }

// Update returns the chunks that take the client's message to msg (nil:
// the message has no parts yet, only the start chunk is sent).
func (u *UIStream) Update(msg *UIMessage) []UIMessageChunk {
	var out []UIMessageChunk
	if !u.started {
		u.started = true
		out = append(out, UIMessageChunk{Type: ChunkStart, MessageID: u.id})
	}
	if msg == nil {
		return out
	}
	if !bytes.Equal(msg.Metadata, u.sent.Metadata) && len(msg.Metadata) > 0 {
		out = append(out, UIMessageChunk{Type: ChunkMessageMetadata, MessageMeta: msg.Metadata})
		u.sent.Metadata = msg.Metadata
	}
	want := make([]Part, len(msg.Parts))
	for i := range msg.Parts {
		want[i] = clientView(msg.Parts[i])
	}
	n := min(len(u.sent.Parts), len(want))
	i := 0
	for ; i < n; i++ {
		if partsEqual(u.sent.Parts[i], want[i]) {
			continue
		}
		chunks, ok := u.advance(i, u.sent.Parts[i], want[i])
		if !ok {
			break
		}
		out = append(out, chunks...)
		have := u.sent.Parts[i]
		u.sent.Parts[i] = want[i]
		if len(chunks) == 0 && (have.Type == PartText || have.Type == PartReasoning) {
			// Only the metadata of a streaming part changed: not sent yet.
			u.sent.Parts[i].ProviderMetadata = have.ProviderMetadata
		}
	}
	if i < n || len(want) < len(u.sent.Parts) {
		k := lastStepStart(u.sent.Parts)
		switch {
		case i > k && len(u.sent.Parts) > k+1:
			// The current step changed: take it back and send it again.
			out = append(out, UIMessageChunk{Type: ChunkResetStep})
			u.sent.Parts = u.sent.Parts[:k+1]
		case i == k && len(want) == k:
			// The attempt that began the step is gone (superseded or
			// retried): its parts are taken back; the client keeps the
			// step-start, which the next attempt's step-start matches.
			if len(u.sent.Parts) > k+1 {
				out = append(out, UIMessageChunk{Type: ChunkResetStep})
				u.sent.Parts = u.sent.Parts[:k+1]
			}
			return out
		default:
			u.broken = true
			return out
		}
	}
	for j := len(u.sent.Parts); j < len(want); j++ {
		out = append(out, u.create(j, want[j])...)
		u.sent.Parts = append(u.sent.Parts, want[j])
	}
	return out
}

// Finish returns the chunks that end the stream: the end of every part
// still open on the client, an error chunk when errorText is set, and the
// finish chunk with reason.
func (u *UIStream) Finish(reason, errorText string) []UIMessageChunk {
	var out []UIMessageChunk
	if !u.started {
		out = u.Update(nil)
	}
	for i := range u.sent.Parts {
		p := &u.sent.Parts[i]
		if (p.Type == PartText || p.Type == PartReasoning) && p.State == "streaming" {
			end := ChunkTextEnd
			if p.Type == PartReasoning {
				end = ChunkReasoningEnd
			}
			out = append(out, UIMessageChunk{Type: end, ID: streamID(i, *p)})
			p.State = "done"
		}
	}
	if errorText != "" {
		out = append(out, UIMessageChunk{Type: ChunkError, ErrorText: errorText})
	}
	return append(out, UIMessageChunk{Type: ChunkFinish, FinishReason: reason})
}

// clientView is a part as a client rebuilds it from the chunks UIStream
// sends: a tool call's input is sent once it is complete, so a streaming
// call has none yet.
func clientView(p Part) Part {
	if p.IsToolPart() && p.State == ToolInputStreaming {
		p.Input, p.RawInput = nil, nil
	}
	return p
}

func lastStepStart(parts []Part) int {
	for k := len(parts) - 1; k >= 0; k-- {
		if parts[k].Type == PartStepStart {
			return k
		}
	}
	return -1
}

func partsEqual(a, b Part) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// streamID is the chunk ID of text or reasoning part i.
func streamID(i int, p Part) string {
	if p.Type == PartReasoning {
		return p.ID
	}
	return fmt.Sprintf("t%d", i)
}

// advance returns the chunks that take part i from have to want in place,
// or false when no chunk can.
func (u *UIStream) advance(i int, have, want Part) ([]UIMessageChunk, bool) {
	if have.Type != want.Type {
		return nil, false
	}
	switch {
	case have.Type == PartText || have.Type == PartReasoning:
		if have.State != "streaming" || !strings.HasPrefix(want.Text, have.Text) || have.ID != want.ID {
			return nil, false
		}
		if len(want.ProviderMetadata) == 0 && len(have.ProviderMetadata) > 0 {
			return nil, false
		}
		var out []UIMessageChunk
		delta, end := ChunkTextDelta, ChunkTextEnd
		if have.Type == PartReasoning {
			delta, end = ChunkReasoningDelta, ChunkReasoningEnd
		}
		id := streamID(i, want)
		pm := want.ProviderMetadata
		if bytes.Equal(pm, have.ProviderMetadata) {
			pm = nil
		}
		// A delta carries text: a chunk without any fails the AI SDK's
		// schema. Metadata that changed on a part still streaming with no
		// new text waits for the next delta or the end (Update keeps the
		// client's metadata until then).
		if suffix := want.Text[len(have.Text):]; suffix != "" {
			out = append(out, UIMessageChunk{Type: delta, ID: id, Delta: suffix, ProviderMetadata: pm})
			pm = nil
		}
		if want.State == "done" {
			c := UIMessageChunk{Type: end, ID: id, ProviderMetadata: pm}
			if have.Type == PartText {
				c.Citations = want.Citations
			}
			out = append(out, c)
		}
		return out, true
	case have.IsToolPart():
		if have.ToolCallID != want.ToolCallID {
			return nil, false
		}
		return toolChunks(&have, want)
	case have.IsDataPart():
		if have.ID == "" || have.ID != want.ID {
			return nil, false
		}
		return []UIMessageChunk{{Type: want.Type, ID: want.ID, Data: want.Data}}, true
	}
	return nil, false
}

// create returns the chunks that add part i.
func (u *UIStream) create(i int, p Part) []UIMessageChunk {
	switch {
	case p.Type == PartStepStart:
		return []UIMessageChunk{{Type: ChunkStartStep}}
	case p.Type == PartText || p.Type == PartReasoning:
		start := UIMessageChunk{Type: ChunkTextStart, ID: streamID(i, p)}
		if p.Type == PartReasoning {
			start.Type = ChunkReasoningStart
		}
		have := Part{Type: p.Type, ID: p.ID, State: "streaming"}
		rest, _ := u.advance(i, have, p)
		return append([]UIMessageChunk{start}, rest...)
	case p.IsToolPart():
		out, _ := toolChunks(nil, p)
		return out
	case p.Type == PartFile || p.Type == PartReasonFile:
		return []UIMessageChunk{{Type: p.Type, URL: p.URL, MediaType: p.MediaType, ProviderMetadata: p.ProviderMetadata}}
	case p.Type == PartSourceURL:
		return []UIMessageChunk{{Type: ChunkSourceURL, SourceID: p.SourceID, URL: p.URL, Title: p.Title, ProviderMetadata: p.ProviderMetadata}}
	case p.Type == PartSourceDoc:
		return []UIMessageChunk{{Type: ChunkSourceDocument, SourceID: p.SourceID, MediaType: p.MediaType, Title: p.Title, Filename: p.Filename, ProviderMetadata: p.ProviderMetadata}}
	case p.Type == PartCustom:
		return []UIMessageChunk{{Type: ChunkCustom, Kind: p.Kind, ProviderMetadata: p.ProviderMetadata}}
	case p.Type == PartSteering:
		return []UIMessageChunk{{Type: ChunkSteeringMessage, ID: p.ID, Parts: p.Parts}}
	case p.IsDataPart():
		return []UIMessageChunk{{Type: p.Type, ID: p.ID, Data: p.Data}}
	}
	return nil
}

// toolStage orders the states of a tool call.
func toolStage(state string) int {
	switch state {
	case ToolInputStreaming:
		return 1
	case ToolInputAvailable:
		return 2
	case ToolApprovalRequested:
		return 3
	case ToolApprovalResponded:
		return 4
	case ToolOutputAvailable, ToolOutputError, ToolOutputDenied:
		return 5
	}
	return 0
}

// toolChunks returns the chunks that take a tool part from have (nil: not
// on the client yet) to want.
func toolChunks(have *Part, want Part) ([]UIMessageChunk, bool) {
	stage := 0
	if have != nil {
		stage = toolStage(have.State)
	}
	target := toolStage(want.State)
	if target == 0 || target < stage {
		return nil, false
	}
	dynamic := want.Type == PartDynamicTool
	name := want.ToolNameOf()
	call := UIMessageChunk{ToolCallID: want.ToolCallID, ToolName: name, Dynamic: dynamic, Title: want.Title,
		ToolMetadata: want.ToolMetadata, ProviderExec: want.ProviderExecuted, ProviderMetadata: want.CallProviderMetadata}
	var out []UIMessageChunk
	if stage == 0 && target == 1 {
		c := call
		c.Type, c.InputEncoding = ChunkToolInputStart, want.InputEncoding
		return append(out, c), true
	}
	if want.State == ToolOutputError && want.Approval == nil && stage < 2 {
		// The input never became available: an input error.
		c := call
		c.Type, c.Input, c.ErrorText = ChunkToolInputError, want.Input, want.ErrorText
		c.ProviderMetadata = want.ResultProviderMetadata
		if c.Input == nil {
			c.Input = json.RawMessage("null")
		}
		return append(out, c), true
	}
	if stage < 2 {
		c := call
		c.Type, c.Input = ChunkToolInputAvailable, want.Input
		out = append(out, c)
	}
	a := want.Approval
	if a != nil && stage < 3 {
		out = append(out, UIMessageChunk{Type: ChunkToolApproval, ApprovalID: a.ID, ToolCallID: want.ToolCallID,
			ApprovalDesc: a.Descriptor, InputSchemaInput: a.InputSchemaInput, Reason: a.RequestReason,
			IsAutomatic: a.IsAutomatic, Signature: a.Signature})
	}
	if a != nil && a.Approved != nil && stage < 4 {
		approved := *a.Approved
		out = append(out, UIMessageChunk{Type: ChunkToolApprovalAnswer, ApprovalID: a.ID, Approved: &approved, Reason: a.Reason})
	}
	switch want.State {
	case ToolOutputAvailable:
		if have == nil || have.State != want.State || !bytes.Equal(have.Output, want.Output) || !sameBool(have.Preliminary, want.Preliminary) {
			out = append(out, UIMessageChunk{Type: ChunkToolOutput, ToolCallID: want.ToolCallID, Output: want.Output,
				ProviderExec: want.ProviderExecuted, ProviderMetadata: want.ResultProviderMetadata,
				ToolMetadata: want.ToolMetadata, Dynamic: dynamic, Preliminary: want.Preliminary})
		}
	case ToolOutputError:
		if have == nil || have.State != want.State {
			out = append(out, UIMessageChunk{Type: ChunkToolOutputError, ToolCallID: want.ToolCallID, ErrorText: want.ErrorText,
				ProviderExec: want.ProviderExecuted, ProviderMetadata: want.ResultProviderMetadata,
				ToolMetadata: want.ToolMetadata, Dynamic: dynamic})
		}
	case ToolOutputDenied:
		if have == nil || have.State != want.State {
			out = append(out, UIMessageChunk{Type: ChunkToolOutputDenied, ToolCallID: want.ToolCallID})
		}
	}
	if have != nil && stage == target && len(out) == 0 {
		return nil, false
	}
	return out, true
}

func sameBool(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
