package protocol

import (
	"encoding/json"
	"strings"
)

// applyChunk applies one UIMessageChunk to the response message, the way the
// AI SDK's processUIMessageStream builds a message from its stream (chunks it
// cannot apply, such as a delta for a part that never started, are skipped
// rather than failing the fold). entry is the chunk's index in the
// projection, or -1 for an outcome recorded after the projection ended.
func (s *AIState) applyChunk(msg *TranscriptMessage, pr *Projection, c UIMessageChunk, entry int) {
	if msg == nil {
		return
	}
	switch c.Type {
	case ChunkStart, ChunkFinish, ChunkMessageMetadata:
		if len(c.MessageMeta) > 0 && string(c.MessageMeta) != "null" {
			msg.Metadata = MergeMetadata(msg.Metadata, c.MessageMeta)
		}
	case ChunkStartStep:
		msg.Parts = append(msg.Parts, Part{Type: PartStepStart})
	case ChunkFinishStep:
		// Version 7: a step's end does not close its parts; each part ends
		// with its own end chunk (or is settled when the step or turn ends).
		pr.text = nil
	case ChunkResetStep:
		s.resetStep(msg, pr)
	case ChunkTextStart, ChunkReasoningStart:
		p := Part{Type: PartText, State: "streaming", ProviderMetadata: c.ProviderMetadata}
		key := "t:" + c.ID
		if c.Type == ChunkReasoningStart {
			p.Type, p.ID, key = PartReasoning, c.ID, "r:"+c.ID
		}
		msg.Parts = append(msg.Parts, p)
		if pr.Open == nil {
			pr.Open = map[string]int{}
		}
		pr.Open[key] = len(msg.Parts) - 1
	case ChunkTextDelta, ChunkReasoningDelta:
		key := "t:" + c.ID
		if c.Type == ChunkReasoningDelta {
			key = "r:" + c.ID
		}
		k, ok := pr.Open[key]
		if !ok || k >= len(msg.Parts) {
			return
		}
		part := &msg.Parts[k]
		part.Text = pr.appendText(k, part.Text, c.Delta)
		if len(c.ProviderMetadata) > 0 {
			part.ProviderMetadata = c.ProviderMetadata
		}
	case ChunkTextEnd, ChunkReasoningEnd:
		key := "t:" + c.ID
		if c.Type == ChunkReasoningEnd {
			key = "r:" + c.ID
		}
		k, ok := pr.Open[key]
		if !ok || k >= len(msg.Parts) {
			return
		}
		msg.Parts[k].State = "done"
		if len(c.ProviderMetadata) > 0 {
			msg.Parts[k].ProviderMetadata = c.ProviderMetadata
		}
		if len(c.Citations) > 0 && c.Type == ChunkTextEnd {
			msg.Parts[k].Citations = c.Citations
		}
		delete(pr.Open, key)
		delete(pr.text, k)
	case ChunkFile, ChunkReasoningFile:
		msg.Parts = append(msg.Parts, Part{Type: c.Type, URL: c.URL, MediaType: c.MediaType, ProviderMetadata: c.ProviderMetadata})
	case ChunkCustom:
		msg.Parts = append(msg.Parts, Part{Type: PartCustom, Kind: c.Kind, ProviderMetadata: c.ProviderMetadata})
	case ChunkSteeringMessage:
		msg.Parts = append(msg.Parts, Part{Type: PartSteering, ID: c.ID, Parts: c.Parts})
	case ChunkSourceURL:
		msg.Parts = append(msg.Parts, Part{Type: PartSourceURL, SourceID: c.SourceID, URL: c.URL, Title: c.Title, ProviderMetadata: c.ProviderMetadata})
	case ChunkSourceDocument:
		msg.Parts = append(msg.Parts, Part{Type: PartSourceDoc, SourceID: c.SourceID, MediaType: c.MediaType, Title: c.Title, Filename: c.Filename, ProviderMetadata: c.ProviderMetadata})
	case ChunkToolInputStart:
		part := s.ensureToolPart(msg, pr, c)
		part.State = ToolInputStreaming
		part.InputEncoding = c.InputEncoding
		if pr.ToolInput == nil {
			pr.ToolInput = map[string]string{}
		}
		pr.ToolInput[c.ToolCallID] = ""
		s.trackTool(pr, c, ToolStatusStreaming)
	case ChunkToolInputDelta:
		text, ok := pr.ToolInput[c.ToolCallID]
		if !ok {
			return
		}
		text += c.InputTextDelta
		pr.ToolInput[c.ToolCallID] = text
		if _, k := findToolPart(msg, c.ToolCallID); k >= 0 {
			if draft, ok := ParsePartialJSON(text); ok {
				msg.Parts[k].Input = draft
			}
		}
	case ChunkToolInputAvailable:
		part := s.ensureToolPart(msg, pr, c)
		part.State = ToolInputAvailable
		part.InputEncoding = "" // as the AI SDK: the encoding is of the streamed input
		part.Input = c.Input
		if len(part.Input) == 0 {
			part.Input = json.RawMessage("{}")
		}
		if c.ProviderExec != nil {
			part.ProviderExecuted = c.ProviderExec
		}
		if len(c.ProviderMetadata) > 0 {
			part.CallProviderMetadata = c.ProviderMetadata
		}
		delete(pr.ToolInput, c.ToolCallID)
		s.trackTool(pr, c, ToolStatusPending)
	case ChunkToolInputError:
		part := s.ensureToolPart(msg, pr, c)
		part.State = ToolOutputError
		part.ErrorText = c.ErrorText
		// Version 7 keeps the unparsable input in input (rawInput is
		// deprecated).
		part.Input, part.RawInput, part.InputEncoding = c.Input, nil, ""
		delete(pr.ToolInput, c.ToolCallID)
		s.trackTool(pr, c, ToolStatusFailed)
	case ChunkToolApproval:
		_, k := findToolPart(msg, c.ToolCallID)
		if k < 0 {
			return
		}
		part := &msg.Parts[k]
		part.State = ToolApprovalRequested
		part.Approval = &ToolApproval{ID: c.ApprovalID, Descriptor: c.ApprovalDesc, Signature: c.Signature,
			RequestReason: c.Reason, IsAutomatic: c.IsAutomatic, InputSchemaInput: c.InputSchemaInput}
		if t, ok := s.Tools[c.ToolCallID]; ok {
			t.Status = ToolStatusApproval
			s.putTool(c.ToolCallID, t)
			s.PendingApprovals[c.ApprovalID] = PendingApproval{
				ToolCallID: c.ToolCallID, ToolName: t.ToolName, RequestID: t.RequestID, GenerationID: t.GenerationID,
			}
		}
	case ChunkToolApprovalAnswer:
		// Only a provider-executed call takes its approval answer from the
		// model's stream: a local call is approved by the approve command
		// alone, never by the model it belongs to.
		for k := len(msg.Parts) - 1; k >= 0; k-- {
			part := &msg.Parts[k]
			if !part.IsToolPart() || part.Approval == nil || part.Approval.ID != c.ApprovalID {
				continue
			}
			if part.ProviderExecuted == nil || !*part.ProviderExecuted || c.Approved == nil {
				return
			}
			part.State = ToolApprovalResponded
			approved := *c.Approved
			part.Approval.Approved = &approved
			part.Approval.Reason = c.Reason
			if len(c.ProviderMetadata) > 0 {
				part.CallProviderMetadata = c.ProviderMetadata
			}
			return
		}
	case ChunkToolOutput, ChunkToolOutputError, ChunkToolOutputDenied:
		_, k := findToolPart(msg, c.ToolCallID)
		if k < 0 {
			return
		}
		part := &msg.Parts[k]
		switch c.Type {
		case ChunkToolOutput:
			part.State, part.Output, part.Preliminary = ToolOutputAvailable, c.Output, c.Preliminary
			if len(part.Output) == 0 {
				part.Output = json.RawMessage("null")
			}
		case ChunkToolOutputError:
			part.State, part.ErrorText = ToolOutputError, c.ErrorText
		default:
			part.State = ToolOutputDenied
		}
		if c.ProviderExec != nil {
			part.ProviderExecuted = c.ProviderExec
		}
		if len(c.ProviderMetadata) > 0 {
			part.ResultProviderMetadata = c.ProviderMetadata
		}
		if t, ok := s.Tools[c.ToolCallID]; ok {
			t.Status = toolStatusOfPart(part)
			s.putTool(c.ToolCallID, t)
		}
	default:
		if strings.HasPrefix(c.Type, "data-") && !c.Transient {
			if c.ID != "" {
				for i := range msg.Parts {
					if msg.Parts[i].Type == c.Type && msg.Parts[i].ID == c.ID {
						msg.Parts[i].Data = c.Data
						return
					}
				}
			}
			msg.Parts = append(msg.Parts, Part{Type: c.Type, ID: c.ID, Data: c.Data})
		}
	}
}

// resetStep removes the parts of the current step (those after its last
// step-start part, and never below the projection's base), with their tool
// calls and approvals, as the AI SDK's reset-step does.
func (s *AIState) resetStep(msg *TranscriptMessage, pr *Projection) {
	from := len(msg.Parts)
	for from > pr.Base && msg.Parts[from-1].Type != PartStepStart {
		from--
	}
	for _, part := range msg.Parts[from:] {
		if !part.IsToolPart() {
			continue
		}
		if t, ok := s.Tools[part.ToolCallID]; ok && t.GenerationID == pr.GenerationID {
			s.dropTool(part.ToolCallID)
		}
		if part.Approval != nil {
			delete(s.PendingApprovals, part.Approval.ID)
		}
	}
	msg.Parts = msg.Parts[:from]
	pr.Open, pr.ToolInput, pr.text = nil, nil, nil
}

// settleStreaming marks the text and reasoning parts of msg from index from
// on that are still streaming as done: a response that stopped, failed or
// finished its step leaves no part streaming, whatever its model sent.
func settleStreaming(msg *TranscriptMessage, from int, pr *Projection) {
	if msg == nil {
		return
	}
	for i := max(from, 0); i < len(msg.Parts); i++ {
		if p := &msg.Parts[i]; (p.Type == PartText || p.Type == PartReasoning) && p.State == "streaming" {
			p.State = "done"
		}
	}
	if pr != nil {
		pr.Open, pr.text = nil, nil
	}
}

// appendText appends delta to the text of part k in amortized constant time
// per byte: a strings.Builder per streaming part grows geometrically, and
// Builder.String shares its bytes without copying. Strings handed out
// earlier stay valid because a Builder only ever appends.
func (pr *Projection) appendText(k int, current, delta string) string {
	if pr.text == nil {
		pr.text = map[int]*strings.Builder{}
	}
	b := pr.text[k]
	if b == nil {
		b = &strings.Builder{}
		b.Grow(2*len(current) + len(delta) + 64)
		b.WriteString(current)
		pr.text[k] = b
	}
	b.WriteString(delta)
	return b.String()
}

// ensureToolPart returns the tool part of c's call in the current step,
// appending it when the call is new.
func (s *AIState) ensureToolPart(msg *TranscriptMessage, pr *Projection, c UIMessageChunk) *Part {
	if _, k := findToolPart(msg, c.ToolCallID); k >= 0 {
		return &msg.Parts[k]
	}
	p := Part{ToolCallID: c.ToolCallID, Title: c.Title, ToolMetadata: c.ToolMetadata, ProviderExecuted: c.ProviderExec}
	if c.Dynamic {
		p.Type, p.ToolName = PartDynamicTool, c.ToolName
	} else {
		p.Type = "tool-" + c.ToolName
	}
	msg.Parts = append(msg.Parts, p)
	return &msg.Parts[len(msg.Parts)-1]
}

// trackTool records a tool call's identity and status in state.tools.
func (s *AIState) trackTool(pr *Projection, c UIMessageChunk, status string) {
	t, ok := s.Tools[c.ToolCallID]
	if ok && toolTerminal(t.Status) {
		return
	}
	if !ok {
		t = ToolActivity{ToolName: c.ToolName, GenerationID: pr.GenerationID, ResponseID: pr.ResponseMessageID}
		if g := s.ActiveGeneration; g != nil && g.GenerationID == pr.GenerationID {
			t.RequestID = g.RequestID
		}
		if a := s.Active; a != nil {
			t.Version = a.Version
		}
	}
	if c.ProviderExec != nil && *c.ProviderExec {
		t.ProviderExecuted = true
	}
	t.Status = status
	s.putTool(c.ToolCallID, t)
}

func findToolPart(msg *TranscriptMessage, toolCallID string) (*TranscriptMessage, int) {
	for i := len(msg.Parts) - 1; i >= 0; i-- {
		if msg.Parts[i].ToolCallID == toolCallID && msg.Parts[i].IsToolPart() {
			return msg, i
		}
	}
	return msg, -1
}

// toolPart finds the part of a tracked tool call.
func (s *AIState) toolPart(toolCallID string) (*TranscriptMessage, int) {
	t, ok := s.Tools[toolCallID]
	if !ok {
		return nil, -1
	}
	msg := s.message(t.ResponseID)
	if msg == nil {
		return nil, -1
	}
	m, k := findToolPart(msg, toolCallID)
	if k < 0 {
		return nil, -1
	}
	return m, k
}

// MergeMetadata shallow-merges JSON object patch onto base (R-GEN-27), as
// the fold merges a chunk's messageMetadata onto its message. A non-object
// on either side replaces base.
func MergeMetadata(base, patch json.RawMessage) json.RawMessage {
	var b, p map[string]json.RawMessage
	if len(base) == 0 || json.Unmarshal(base, &b) != nil || json.Unmarshal(patch, &p) != nil || b == nil || p == nil {
		return patch
	}
	for k, v := range p {
		b[k] = v
	}
	out, err := json.Marshal(b)
	if err != nil {
		return patch
	}
	return out
}

// ParsePartialJSON parses the prefix of a JSON value as streamed tool
// arguments arrive (OQ-39): it closes open strings, arrays and objects, drops
// a dangling key or separator, and returns the completed value. ok is false
// when the prefix cannot be completed; callers then keep their previous
// draft. The draft is for display only and never authorizes execution
// (R-STATE-26).
func ParsePartialJSON(text string) (json.RawMessage, bool) {
	t := strings.TrimSpace(text)
	if t == "" {
		return nil, false
	}
	if json.Valid([]byte(t)) {
		return json.RawMessage(t), true
	}
	var stack []byte
	inString, escaped := false, false
	for i := 0; i < len(t); i++ {
		ch := t[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
			continue
		}
		switch ch {
		case '"':
			inString = true
		case '{', '[':
			stack = append(stack, ch)
		case '}', ']':
			if len(stack) == 0 {
				return nil, false
			}
			stack = stack[:len(stack)-1]
		}
	}
	candidate := t
	if inString {
		if escaped {
			candidate = candidate[:len(candidate)-1]
		}
		candidate += `"`
	}
	for attempt := 0; attempt < 4; attempt++ {
		closed := closeStack(candidate, stack)
		if json.Valid([]byte(closed)) {
			return json.RawMessage(closed), true
		}
		trimmed := strings.TrimRight(candidate, " \t\r\n")
		switch {
		case strings.HasSuffix(trimmed, ","), strings.HasSuffix(trimmed, ":"):
			candidate = trimmed[:len(trimmed)-1]
		default:
			// Drop an incomplete key (a string right after '{' or ',') or a
			// partial literal such as tru / 1.
			k := strings.LastIndexAny(trimmed, ",{[")
			if k < 0 {
				return nil, false
			}
			if trimmed[k] == ',' {
				candidate = trimmed[:k]
			} else {
				candidate = trimmed[:k+1]
			}
		}
	}
	return nil, false
}

func closeStack(s string, stack []byte) string {
	var b strings.Builder
	b.WriteString(s)
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i] == '{' {
			b.WriteByte('}')
		} else {
			b.WriteByte(']')
		}
	}
	return b.String()
}
