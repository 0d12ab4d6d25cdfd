package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Schema validates a JSON value, typically a compiled JSON Schema. The
// protocol package declares the seam and imports no validator; tools and
// runtime packages adapt a maintained JSON Schema library to it.
type Schema interface {
	Validate(value json.RawMessage) error
}

// SchemaFunc adapts a function to Schema.
type SchemaFunc func(json.RawMessage) error

// Validate calls f.
func (f SchemaFunc) Validate(v json.RawMessage) error { return f(v) }

// ConfigError is a construction-time error: an option that cannot work,
// named with where it belongs. It is the Go form of the TypeError
// that A2's TypeScript API throws at construction (OQ-40).
type ConfigError struct {
	Option  string
	Message string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("a2: option %s: %s", e.Option, e.Message) }

func configErr(option, format string, args ...any) error {
	return &ConfigError{Option: option, Message: fmt.Sprintf(format, args...)}
}

// AppReducer is an application reducer folded after the AI fold
// (R-CONTRACT-06, R-CONTRACT-07). Build one with NewReducer.
type AppReducer interface {
	// Name is the reducer's snapshot identity: rename it when Fold changes.
	Name() string
	initial() any
	fold(state any, ev Event) (any, error)
	decode(b json.RawMessage) (any, error)
}

// Reduce folds evs with r, from state, or from r's initial state when state
// is nil, and returns the state: how a session is read through a reducer
// other than its contract's (R-CONTRACT-19).
func Reduce(r AppReducer, state any, evs []Event) (any, error) {
	if state == nil {
		state = r.initial()
	}
	for _, ev := range evs {
		next, err := r.fold(state, ev)
		if err != nil {
			return nil, err
		}
		state = next
	}
	return state, nil
}

// NewReducer builds an application reducer over state type X. fold sees X
// and every event of the log, built-in and application alike, never the
// transcript; it must be pure (deterministic, no I/O) and must not modify
// the state it is given in place when X holds references (return a new
// value instead). X must encode to a JSON object.
func NewReducer[X any](name string, initial X, fold func(X, Event) X) AppReducer {
	return &reducer[X]{name: name, init: initial, f: fold}
}

type reducer[X any] struct {
	name string
	init X
	f    func(X, Event) X
}

func (r *reducer[X]) Name() string { return r.name }
func (r *reducer[X]) initial() any { return r.init }
func (r *reducer[X]) fold(state any, ev Event) (any, error) {
	x, ok := state.(X)
	if !ok {
		return nil, fmt.Errorf("protocol: reducer %s: state has type %T", r.name, state)
	}
	return r.f(x, ev), nil
}
func (r *reducer[X]) decode(b json.RawMessage) (any, error) {
	var x X
	if err := json.Unmarshal(b, &x); err != nil {
		return nil, err
	}
	return x, nil
}

// ContractOptions are the options of AgentContract.
type ContractOptions struct {
	// Name names the contract (and the agent serving it).
	Name string
	// Events are the application events: type name to payload schema. A nil
	// schema accepts any JSON payload.
	Events map[string]Schema
	// MessageSchema validates the messages that commands carry, for a
	// narrower message type (R-CONTRACT-05).
	MessageSchema Schema
	// Reducer is the optional application reducer.
	Reducer AppReducer
	// ServerOnlyEvents marks Events as server-only: browsers may not push
	// them. agent({name, events}) contracts are built this way
	// (R-CONTRACT-12).
	ServerOnlyEvents bool
}

// Contract is the built-in AI protocol plus application events and an
// optional application reducer (R-CONTRACT-01). Only AgentContract builds
// one.
type Contract struct {
	opts  ContractOptions
	built bool
	// handled are the application event types an agent handles (see
	// WithHandlers); origin is the contract WithHandlers copied.
	handled map[string]bool
	origin  *Contract
}

// Is reports whether c and other are the same contract definition: the
// same value, or copies WithHandlers made of one.
func (c *Contract) Is(other *Contract) bool {
	return c != nil && other != nil && c.root() == other.root()
}

func (c *Contract) root() *Contract {
	if c.origin != nil {
		return c.origin
	}
	return c
}

// aiStateKeys are the JSON keys of AIState, which application state keys may
// not shadow (R-CONTRACT-03).
var aiStateKeys = func() map[string]bool {
	b, _ := json.Marshal(NewAIState())
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	keys := map[string]bool{}
	for k := range m {
		keys[k] = true
	}
	// Optional keys that the empty state omits.
	for _, k := range []string{"activeRequestId", "activeRequestReason", "activeRequestSourceGenerationId",
		"activeResponseMessageId", "activeProjection", "terminalRequestIds", "terminalGenerations", "calibration",
		"pendingHandlers"} {
		keys[k] = true
	}
	return keys
}()

// AgentContract builds a contract (R-CONTRACT-01). It returns a
// *ConfigError when an application event uses a built-in name
// (R-CONTRACT-04) or the reducer's initial state is not a JSON object or
// has a key that AIState also has (R-CONTRACT-03).
func AgentContract(o ContractOptions) (*Contract, error) {
	if strings.TrimSpace(o.Name) == "" {
		return nil, configErr("name", "is required")
	}
	for _, name := range sortedKeys(o.Events) {
		if name == "" {
			return nil, configErr("events", "an event type name is empty")
		}
		if IsBuiltinType(name) {
			return nil, configErr("events", "%q is in the built-in \"ai.\" namespace and cannot be replaced", name)
		}
	}
	if r := o.Reducer; r != nil {
		if strings.TrimSpace(r.Name()) == "" {
			return nil, configErr("reducer.name", "is required")
		}
		b, err := json.Marshal(r.initial())
		if err != nil {
			return nil, configErr("reducer.initialState", "does not encode as JSON: %v", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil || m == nil {
			return nil, configErr("reducer.initialState", "must encode as a JSON object")
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if aiStateKeys[k] {
				return nil, configErr("reducer.initialState", "key %q shadows the AIState key of the same name", k)
			}
		}
	}
	return &Contract{opts: o, built: true}, nil
}

// Name returns the contract's name.
func (c *Contract) Name() string { return c.opts.Name }

// Reducer returns the application reducer, or nil.
func (c *Contract) Reducer() AppReducer { return c.opts.Reducer }

// ReducerName is the session state's snapshot identity (R-CONTRACT-09):
// AIStateReducer without an application reducer, else
// "<reducer name>+a2.ai.state.v27".
func (c *Contract) ReducerName() string {
	if c == nil || c.opts.Reducer == nil {
		return AIStateReducer
	}
	return c.opts.Reducer.Name() + "+" + AIStateReducer
}

// HasEvent reports whether the contract declares an application event.
func (c *Contract) HasEvent(typ string) bool {
	_, ok := c.opts.Events[typ]
	return ok
}

// ResolveContract is the contract rule of agent construction
// (R-CONTRACT-12, R-CONTRACT-13): an agent takes a name or a contract,
// never both; with a name it builds its own contract, whose events are
// server-only; a contract must come from AgentContract.
func ResolveContract(name string, contract *Contract, events map[string]Schema, messageSchema Schema) (*Contract, error) {
	switch {
	case name != "" && contract != nil:
		return nil, configErr("name", "give name or contract, never both")
	case contract != nil:
		if !contract.built {
			return nil, configErr("contract", "was not built by AgentContract; serve custom contracts with the core server")
		}
		if events != nil || messageSchema != nil {
			return nil, configErr("events", "belong in the contract when a contract is given")
		}
		return contract, nil
	case name != "":
		return AgentContract(ContractOptions{Name: name, Events: events, MessageSchema: messageSchema, ServerOnlyEvents: true})
	}
	return nil, configErr("name", `an agent needs a name or a contract: Name: "support" names it in the routes (/v1/agents/support/...); `+
		"Contract: protocol.AgentContract(...) also declares application events clients may push and a reducer (docs/embedding.md)")
}

// ValidateHandlers checks the event names of application handlers
// (R-CONTRACT-14): a handler may not name an event the agent handles itself
// (any built-in "ai." event), and must name an event of the contract.
func (c *Contract) ValidateHandlers(names []string) error {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for _, n := range sorted {
		if IsBuiltinType(n) {
			return configErr("handlers", "%q is handled by the agent itself", n)
		}
		if !c.HasEvent(n) {
			return configErr("handlers", "%q is not an event of contract %q", n, c.Name())
		}
	}
	return nil
}

// AcceptsContractFreeClient reports whether a contract-free client, which
// folds only the built-in reducer, can follow a session of this reducer
// name (R-CONTRACT-22).
func AcceptsContractFreeClient(reducerName string) bool { return reducerName == AIStateReducer }

// ErrUnknownEventType is returned (wrapped in a *ValidationError) for a
// pushed event of a type the contract does not accept.
var ErrUnknownEventType = errors.New("unknown event type")

// ValidateIngress checks one event pushed by a client (Untrusted) or
// appended by server code (Trusted), before anything is appended
// (R-FETCH-02..04, R-FETCH-08, R-INPUT-19..25): caller ID rules, the type
// (ai.control.requested, the contract's events, and for trusted appends
// the session lifecycle events), the payload shape and schema, and the
// trust rules. It never looks at session state.
func (c *Contract) ValidateIngress(ev Event, trust Trust) error {
	if err := ValidateCallerID("id", ev.ID); err != nil {
		return err
	}
	if len(ev.Payload) == 0 {
		return invalid("payload", "is required")
	}
	if !json.Valid(ev.Payload) {
		return invalid("payload", "is not valid JSON")
	}
	switch {
	case ev.Type == TypeControlRequested:
		cmd, err := ValidateCommand(ev, trust)
		if err != nil {
			return err
		}
		if cmd.Message != nil && c != nil && c.opts.MessageSchema != nil {
			if err := c.opts.MessageSchema.Validate(mustJSON(cmd.Message)); err != nil {
				return invalid("payload.message", "does not match the contract's message schema: %v", err)
			}
		}
		return nil
	case ev.Type == TypeSessionCreated || ev.Type == TypeSessionClosed:
		if trust != Trusted {
			return invalid("type", "%q is a trusted server append; browser ingress refuses it", ev.Type)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(ev.Payload, &m) != nil {
			return invalid("payload", "must be a JSON object")
		}
		return nil
	case IsBuiltinType(ev.Type) && slices.Contains(BuiltinTypes, ev.Type):
		return invalid("type", "%q is written by A2 itself and cannot be pushed; %s", ev.Type, c.pushable(trust))
	case IsBuiltinType(ev.Type):
		return invalid("type", "%q is not an event type (the \"ai.\" namespace is A2's)%s; %s",
			ev.Type, didYouMean(ev.Type, c.pushableTypes(trust)), c.pushable(trust))
	case ev.Type == "":
		return invalid("type", "is required; %s", c.pushable(trust))
	}
	if c == nil || !c.HasEvent(ev.Type) {
		return &ValidationError{Field: "type", Message: fmt.Sprintf("%v %q%s; %s", ErrUnknownEventType, ev.Type, didYouMean(ev.Type, c.pushableTypes(trust)), c.pushable(trust))}
	}
	if c.opts.ServerOnlyEvents && trust != Trusted {
		return invalid("type", "%q is a server-only event of agent %q", ev.Type, c.Name())
	}
	if s := c.opts.Events[ev.Type]; s != nil {
		if err := s.Validate(ev.Payload); err != nil {
			return invalid("payload", "does not match the schema of %q: %v", ev.Type, err)
		}
	}
	return nil
}

// pushableTypes are the event types a pusher of that trust may push to an
// agent of contract c, in a fixed order: commands, then the contract's own
// events (which a named agent's clients may not push), then for trusted
// appends the session lifecycle events.
func (c *Contract) pushableTypes(trust Trust) []string {
	types := []string{TypeControlRequested}
	if c != nil && (trust == Trusted || !c.opts.ServerOnlyEvents) {
		types = append(types, sortedKeys(c.opts.Events)...)
	}
	if trust == Trusted {
		types = append(types, TypeSessionCreated, TypeSessionClosed)
	}
	return types
}

// pushable says what may be pushed, for the message of a refused type.
func (c *Contract) pushable(trust Trust) string {
	types := c.pushableTypes(trust)
	if len(types) == 1 {
		return fmt.Sprintf("a client pushes only %q (commands: send, steer, stop, ...)", types[0])
	}
	return "the types this agent accepts are " + quotedList(types)
}

// quotedList is a list of names for a message: "a", "b" and "c".
func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// didYouMean suggests the name among names closest to a misspelled one
// (" (did you mean "x"?)"), or nothing when none is close.
func didYouMean(got string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		if d := editDistance(strings.ToLower(got), strings.ToLower(n)); best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" || bestD > max(2, len(best)/4) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of two strings, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// SessionState is the state of a session: AIState merged with the
// application state (R-CONTRACT-02). It encodes as one JSON object.
type SessionState struct {
	AI  *AIState
	App any
}

// NewState returns the initial state of a session of contract c (nil for
// the built-in contract).
func (c *Contract) NewState() *SessionState {
	st := &SessionState{AI: NewAIState()}
	if c != nil && c.opts.Reducer != nil {
		st.App = c.opts.Reducer.initial()
	}
	return st
}

// Fold applies one event: the AI fold, then the application fold
// (R-CONTRACT-07), which sees every event (R-CONTRACT-06).
func (c *Contract) Fold(st *SessionState, ev Event) error {
	if err := Fold(st.AI, ev); err != nil {
		return err
	}
	if c != nil && c.handled[ev.Type] {
		if st.AI.PendingHandlers == nil {
			st.AI.PendingHandlers = map[string]string{}
		}
		st.AI.PendingHandlers[ev.ID] = ev.Type
	}
	return c.foldApp(st, ev)
}

// WithHandlers returns a copy of c whose fold records every event of the
// given application types in AIState.PendingHandlers, until an
// ai.handler.completed names it (R-CONTRACT-15): the work of running the
// agent's handlers is then part of the state, and of its snapshots. The
// types are checked by ValidateHandlers.
func (c *Contract) WithHandlers(types []string) (*Contract, error) {
	if err := c.ValidateHandlers(types); err != nil {
		return nil, err
	}
	if len(types) == 0 {
		return c, nil
	}
	out := *c
	out.origin = c.root()
	out.handled = map[string]bool{}
	for _, t := range types {
		out.handled[t] = true
	}
	return &out, nil
}

// DecideInPlace decides cmd on st (see protocol.DecideInPlace) and folds
// cmd and the returned events into st, AI and application state alike. On
// error st may be partly changed and must be discarded.
func (c *Contract) DecideInPlace(p Policy, st *SessionState, cmd Event) ([]Event, error) {
	out, err := DecideInPlace(p, st.AI, cmd)
	if err != nil {
		return nil, err
	}
	if err := c.foldApp(st, cmd); err != nil {
		return nil, err
	}
	return out, c.foldApp(st, out...)
}

// StepInPlace runs the control lane's step on st (see protocol.StepInPlace)
// and folds the returned events into st, AI and application state alike. On
// error st may be partly changed and must be discarded.
func (c *Contract) StepInPlace(p Policy, st *SessionState) ([]Event, error) {
	out, err := StepInPlace(p, st.AI)
	if err != nil {
		return nil, err
	}
	return out, c.foldApp(st, out...)
}

// foldApp folds evs into the application state only.
func (c *Contract) foldApp(st *SessionState, evs ...Event) error {
	if c == nil || c.opts.Reducer == nil {
		return nil
	}
	for _, ev := range evs {
		next, err := c.opts.Reducer.fold(st.App, ev)
		if err != nil {
			return err
		}
		st.App = next
	}
	return nil
}

// MarshalJSON merges the AI state and the application state into one
// object. Keys never clash: AgentContract refuses a clashing initial state.
func (st *SessionState) MarshalJSON() ([]byte, error) {
	ai, err := json.Marshal(st.AI)
	if err != nil {
		return nil, err
	}
	if st.App == nil {
		return ai, nil
	}
	app, err := json.Marshal(st.App)
	if err != nil {
		return nil, err
	}
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(ai, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(app, &b); err != nil {
		return nil, fmt.Errorf("protocol: application state must encode as a JSON object: %w", err)
	}
	for k, v := range b {
		if _, clash := a[k]; !clash {
			a[k] = v
		}
	}
	return json.Marshal(a)
}

// UnmarshalState decodes a session state encoded by SessionState.MarshalJSON
// (a snapshot of this contract's reducer).
func (c *Contract) UnmarshalState(b []byte) (*SessionState, error) {
	ai, err := UnmarshalState(b)
	if err != nil {
		return nil, err
	}
	st := &SessionState{AI: ai}
	if c != nil && c.opts.Reducer != nil {
		if st.App, err = c.opts.Reducer.decode(b); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// DeriveUIMessages folds a raw event history into its transcript
// (deriveUIMessages of A2's TypeScript API). It agrees with Fold by construction
// (R-CONTRACT-18) and fails like it when an ai.message.created precedes its
// command (R-LOG-13).
func DeriveUIMessages(history []Event) ([]TranscriptMessage, error) {
	s := NewAIState()
	for _, ev := range history {
		if err := Fold(s, ev); err != nil {
			return nil, err
		}
	}
	return s.Messages, nil
}

// Hydrate folds the events of history that come after a snapshot taken at
// index `at` (R-CONTRACT-17, OQ-46): events at or before it are skipped, so
// seen history never folds twice.
func (c *Contract) Hydrate(st *SessionState, at uint64, history []Event) (uint64, error) {
	for _, ev := range history {
		if ev.Index != 0 && ev.Index <= at {
			continue
		}
		if err := c.Fold(st, ev); err != nil {
			return at, err
		}
		if ev.Index > at {
			at = ev.Index
		}
	}
	return at, nil
}
