package protocol

import "maps"

// stateIndex answers the fold's lookups that would otherwise scan what
// grows with a session's history: a message by its ID (the active response,
// or one that does not exist yet, which a scan only learns at the
// transcript's start) and the tool calls of a generation or still open. A
// session of 500 tool turns scanned 500 calls several times per event.
//
// It is derived state, never encoded: it is built from Messages and Tools
// by the writer, on its first write to either in a state large enough for
// scans to cost (indexFrom), and kept by every later write, which goes
// through addMessage, putTool and dropTool. Messages are only ever
// appended. An index belongs to the AIState that built it (owner): a copy
// of the struct, which shares or replaces the maps, does not use it, and
// reads scan as before, so a read never writes and states read from other
// goroutines stay read-only. Clone copies its source's index for the
// clone; StepCopy keeps none.
type stateIndex struct {
	owner *AIState
	// messages maps a message ID to its last position in Messages; it
	// covers Messages[:indexed].
	messages map[string]int
	indexed  int
	// toolGens counts the calls of each generation; open holds the calls
	// without a terminal status, and unsettled those whose A2-owned
	// execution has not settled (toolWorkUnsettled).
	toolGens  map[string]int
	open      map[string]struct{}
	unsettled map[string]struct{}
}

// indexFrom is the size of a state (messages or tool calls) from which
// its writer keeps an index: below it, the scans cost less than the maps.
// The package's tests set it to 1, so that their states keep one and the
// random sessions check it.
var indexFrom = 32

// index returns s's index, nil when s has none of its own (scan then).
func (s *AIState) index() *stateIndex {
	if x := s.idx; x != nil && x.owner == s && x.indexed == len(s.Messages) {
		return x
	}
	return nil
}

// writeIndex returns the index a write keeps up, building it when s is
// large enough and has none of its own; nil below that size.
func (s *AIState) writeIndex() *stateIndex {
	if x := s.idx; x != nil && x.owner == s {
		if x.indexed != len(s.Messages) {
			x.indexMessages(s)
		}
		return x
	}
	if len(s.Messages) < indexFrom && len(s.Tools) < indexFrom {
		s.idx = nil
		return nil
	}
	x := &stateIndex{owner: s, messages: make(map[string]int, len(s.Messages)),
		toolGens: map[string]int{}, open: map[string]struct{}{}, unsettled: map[string]struct{}{}}
	x.indexMessages(s)
	for id, t := range s.Tools {
		x.addTool(id, t)
	}
	s.idx = x
	return x
}

func (x *stateIndex) indexMessages(s *AIState) {
	if x.indexed > len(s.Messages) {
		clear(x.messages)
		x.indexed = 0
	}
	for i := x.indexed; i < len(s.Messages); i++ {
		x.messages[s.Messages[i].ID] = i
	}
	x.indexed = len(s.Messages)
}

func (x *stateIndex) addTool(id string, t ToolActivity) {
	x.toolGens[t.GenerationID]++
	if !toolTerminal(t.Status) {
		x.open[id] = struct{}{}
	}
	if toolWorkUnsettled(t) {
		x.unsettled[id] = struct{}{}
	}
}

func (x *stateIndex) removeTool(id string, t ToolActivity) {
	if n := x.toolGens[t.GenerationID]; n > 1 {
		x.toolGens[t.GenerationID] = n - 1
	} else {
		delete(x.toolGens, t.GenerationID)
	}
	delete(x.open, id)
	delete(x.unsettled, id)
}

// cloneFor copies x for c, a Clone of its owner.
func (x *stateIndex) cloneFor(c *AIState) *stateIndex {
	return &stateIndex{owner: c, messages: maps.Clone(x.messages), indexed: x.indexed,
		toolGens: maps.Clone(x.toolGens), open: maps.Clone(x.open), unsettled: maps.Clone(x.unsettled)}
}

// addMessage appends m to the transcript.
func (s *AIState) addMessage(m TranscriptMessage) {
	s.Messages = append(s.Messages, m)
	if x := s.writeIndex(); x != nil {
		x.messages[m.ID] = len(s.Messages) - 1
		x.indexed = len(s.Messages)
	}
}

// putTool sets a tool call's activity.
func (s *AIState) putTool(id string, t ToolActivity) {
	x := s.writeIndex()
	if x != nil {
		if old, ok := s.Tools[id]; ok {
			x.removeTool(id, old)
		}
		x.addTool(id, t)
	}
	s.Tools[id] = t
}

// dropTool removes a tool call.
func (s *AIState) dropTool(id string) {
	if x := s.writeIndex(); x != nil {
		if old, ok := s.Tools[id]; ok {
			x.removeTool(id, old)
		}
	}
	delete(s.Tools, id)
}
