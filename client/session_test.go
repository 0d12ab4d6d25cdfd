package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/client"
	"github.com/a2-runtime/a2/gateway"
	"github.com/a2-runtime/a2/gateway/gatewaytest"
	"github.com/a2-runtime/a2/protocol"
)

// holdingProxy holds pushes while hold is set, until release is called.
type holdingProxy struct {
	hold    atomic.Bool
	release chan struct{}
	posts   atomic.Int64
}

func newHoldingProxy(t *testing.T, n *gatewaytest.Node) (*holdingProxy, string) {
	h := &holdingProxy{release: make(chan struct{})}
	url := proxy(t, n, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost {
			h.posts.Add(1)
			if h.hold.Load() {
				select {
				case <-h.release:
				case <-r.Context().Done():
				}
			}
		}
		return false
	})
	return h, url
}

func open(t *testing.T, c *client.Client, session string) *client.Session {
	t.Helper()
	s, err := c.Open(testContext(t), session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if s.ID() != session {
		t.Fatalf("opened session %q, its ID is %q", session, s.ID())
	}
	return s
}

// waitView waits until cond holds for the optimistic view.
func waitView(t *testing.T, s *client.Session, what string, cond func(*protocol.AIState) bool) *protocol.AIState {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		ch := s.Changed()
		if v := s.State(); cond(v) {
			return v
		}
		select {
		case <-ch:
		case <-timeout:
			b, _ := json.Marshal(s.State())
			t.Fatalf("timed out waiting for %s; view %s", what, b)
		}
	}
}

func waitConfirmed(t *testing.T, s *client.Session, what string, cond func(*protocol.AIState) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Wait(ctx, cond); err != nil {
		st, _ := s.Confirmed()
		b, _ := json.Marshal(st)
		t.Fatalf("waiting for %s: %v; confirmed %s", what, err, b)
	}
}

func textOf(m protocol.TranscriptMessage) string {
	var b bytes.Buffer
	for _, p := range m.Parts {
		if p.Type == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func idle(s *protocol.AIState) bool { return s.Active == nil && len(s.Inbox.Items) == 0 }

// R-OPT-01 R-OPT-02 R-OPT-05 R-OPT-09 R-CLIENT-17 R-INPUT-27 R-INPUT-32: an
// idle send shows at once as a starting turn while its push is in flight;
// the push resolves to the persisted command, whose ID is its receipt's
// commandId; Confirmed closes when the stream brings it back; the receipt
// retires the pending command. Steering during the turn shows after the
// current response until it is admitted.
func TestSessionOptimisticSend(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"replies":[{"text":"held answer","gate":"g"}],"default":{"text":"the steered answer"}}`})
	h, url := newHoldingProxy(t, n)
	c := newClient(t, url, client.Options{})
	s := open(t, c, "s1")
	ctx := testContext(t)

	h.hold.Store(true)
	type result struct {
		res *client.PushResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Send(ctx, "Hi")
		done <- result{res, err}
	}()
	v := waitView(t, s, "the optimistic send", func(v *protocol.AIState) bool { return len(v.Messages) == 1 })
	if !v.Starting || v.Status != protocol.StatusSubmitted || protocol.Indicator(v) != protocol.IndicatorStarting || s.Indicator() != protocol.IndicatorStarting {
		t.Fatalf("the pending send shows starting %v, status %s", v.Starting, v.Status)
	}
	if confirmed, index := s.Confirmed(); len(confirmed.Messages) != 0 || index != 0 || len(s.Pending()) != 1 {
		t.Fatalf("confirmed %d messages at %d, %d pending", len(confirmed.Messages), index, len(s.Pending()))
	}
	sentID := v.Messages[0].ID
	close(h.release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.res.Events) != 1 || r.res.Events[0].ID != sentID || r.res.Events[0].Index != 2 { // after ai.session.created
		t.Fatalf("the send resolved to %+v", r.res.Events)
	}
	select {
	case <-r.res.Confirmed():
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never delivered the send back")
	}
	waitConfirmed(t, s, "the receipt", func(st *protocol.AIState) bool {
		return st.Receipt != nil && st.Receipt.CommandID == sentID && st.Receipt.Outcome == protocol.OutcomeApplied
	})
	if p := s.Pending(); len(p) != 0 {
		t.Fatalf("the receipt did not retire the send: %+v", p)
	}
	waitConfirmed(t, s, "streaming", func(st *protocol.AIState) bool { return st.Status == protocol.StatusStreaming })
	if s.State().Starting {
		t.Fatal("still starting once the turn is confirmed (R-OPT-04)")
	}

	// R-OPT-05: steering shows after the current response.
	steer, err := s.Steer(ctx, "Also this")
	if err != nil {
		t.Fatal(err)
	}
	steerID := steer.Events[0].ID
	v = waitView(t, s, "the steering", func(v *protocol.AIState) bool { return len(v.Messages) == 3 })
	if v.Messages[2].ID != steerID || v.Messages[1].Role != protocol.RoleAssistant || len(v.Inbox.Items) != 0 {
		t.Fatalf("the steering shows at %+v", v.Messages)
	}
	n.Model.Release("g")
	waitConfirmed(t, s, "the handoff to the steering", func(st *protocol.AIState) bool { return idle(st) && len(st.Messages) == 4 })
	st, _ := s.Confirmed()
	if st.Messages[2].ID != steerID || textOf(st.Messages[3]) != "the steered answer" {
		t.Fatalf("transcript %+v", st.Messages)
	}
}

// R-OPT-09 R-CLIENT-17: a push that fails rejects, and its optimistic
// display rolls back.
func TestSessionRollsBackAFailedPush(t *testing.T) {
	deny := func(_ context.Context, op gateway.Operation) error {
		for _, ev := range op.Events {
			if bytes.Contains(ev.Payload, []byte("forbidden")) {
				return errors.New("not allowed")
			}
		}
		return nil
	}
	n := gatewaytest.Start(t, gatewaytest.Options{Gateway: gateway.Options{Authorize: deny}})
	h, url := newHoldingProxy(t, n)
	c := newClient(t, url, client.Options{})
	s := open(t, c, "s1")
	h.hold.Store(true)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Send(testContext(t), "something forbidden")
		errc <- err
	}()
	waitView(t, s, "the optimistic send", func(v *protocol.AIState) bool { return len(v.Messages) == 1 && v.Starting })
	close(h.release)
	err := <-errc
	if !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("the denied push resolved with %v", err)
	}
	v := s.State()
	if len(v.Messages) != 0 || v.Starting || len(v.Inbox.Items) != 0 || len(s.Pending()) != 0 || v.Status != protocol.StatusIdle {
		t.Fatalf("the failed send still shows: %+v", v)
	}
}

// R-STOP-03 R-STOP-04 R-INPUT-32: Stop with no turn shown pushes nothing
// and resolves to no events; Stop during a turn carries the turn it saw,
// previews the stop at once and is applied.
func TestSessionStop(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"replies":[{"text":"never finished","gate":"g"}]}`})
	h, url := newHoldingProxy(t, n)
	c := newClient(t, url, client.Options{})
	s := open(t, c, "s1")
	ctx := testContext(t)
	res, err := s.Stop(ctx)
	if err != nil || len(res.Events) != 0 || h.posts.Load() != 0 {
		t.Fatalf("Stop when idle: %+v, %v, %d pushes", res, err, h.posts.Load())
	}
	select {
	case <-res.Confirmed():
	default:
		t.Fatal("an empty result is not confirmed at once")
	}
	if _, err := s.Send(ctx, "Hi"); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, s, "streaming", func(st *protocol.AIState) bool {
		return st.Status == protocol.StatusStreaming && st.ActiveProjection != nil && len(st.ActiveProjection.Entries) > 0
	})
	turn := s.State().Active.TurnID
	h.hold.Store(true)
	done := make(chan *client.PushResult, 1)
	go func() {
		res, err := s.Stop(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	v := waitView(t, s, "the stop preview", func(v *protocol.AIState) bool { return len(s.Pending()) == 1 })
	if v.Active != nil || v.Status != protocol.StatusIdle {
		t.Fatalf("the pending stop shows active %+v, status %s", v.Active, v.Status)
	}
	var c2 protocol.Command
	if err := json.Unmarshal(s.Pending()[0].Payload, &c2); err != nil || c2.Action != protocol.ActionStop || c2.TurnID == nil || *c2.TurnID != turn || c2.LastSeenIndex == nil {
		t.Fatalf("stop command %s", s.Pending()[0].Payload)
	}
	close(h.release)
	stop := <-done
	if stop == nil || len(stop.Events) != 1 {
		t.Fatal("the stop did not resolve to its command")
	}
	waitConfirmed(t, s, "the stop's receipt", func(st *protocol.AIState) bool {
		return st.Receipt != nil && st.Receipt.CommandID == stop.Events[0].ID && st.Active == nil
	})
	if st, _ := s.Confirmed(); st.Receipt.Outcome != protocol.OutcomeApplied {
		t.Fatalf("stop receipt %+v", st.Receipt)
	}
}

// R-RETRY-05 R-CLIENT-15: Retry with nothing failed pushes nothing; after a
// failure each Retry carries a fresh retryId.
func TestSessionRetry(t *testing.T) {
	n := gatewaytest.Start(t, gatewaytest.Options{Script: `{"replies":[{"text":"partial","error":"overloaded"},{"error":"still overloaded"}],"default":{"text":"finally"}}`})
	h, url := newHoldingProxy(t, n)
	c := newClient(t, url, client.Options{})
	s := open(t, c, "s1")
	ctx := testContext(t)
	if res, err := s.Retry(ctx); err != nil || len(res.Events) != 0 || h.posts.Load() != 0 {
		t.Fatalf("Retry with nothing failed: %+v, %v", res, err)
	}
	if _, err := s.Send(ctx, "Hi"); err != nil {
		t.Fatal(err)
	}
	var retryIDs []string
	for _, reason := range []string{": overloaded", ": still overloaded"} {
		waitConfirmed(t, s, "the failure"+reason, func(st *protocol.AIState) bool {
			return st.Status == protocol.StatusFailed && st.Error != nil && strings.HasSuffix(st.Error.Message, reason)
		})
		res, err := s.Retry(ctx)
		if err != nil || len(res.Events) != 1 {
			t.Fatalf("Retry: %+v, %v", res, err)
		}
		var cmd protocol.Command
		if err := json.Unmarshal(res.Events[0].Payload, &cmd); err != nil {
			t.Fatal(err)
		}
		retryIDs = append(retryIDs, cmd.RetryID)
		waitConfirmed(t, s, "the retry's receipt", func(st *protocol.AIState) bool {
			return st.Receipt != nil && st.Receipt.CommandID == res.Events[0].ID && st.Receipt.Outcome == protocol.OutcomeApplied
		})
	}
	if retryIDs[0] == "" || retryIDs[0] == retryIDs[1] {
		t.Fatalf("retry IDs %v", retryIDs)
	}
	waitConfirmed(t, s, "the answer", func(st *protocol.AIState) bool { return idle(st) && st.Status == protocol.StatusIdle })
	st, _ := s.Confirmed()
	if textOf(st.Messages[len(st.Messages)-1]) != "finally" {
		t.Fatalf("answer %q", textOf(st.Messages[len(st.Messages)-1]))
	}
}

// R-CLIENT-06 R-OPT-12: a client of an extended contract folds the
// application state beside the AI state; its own application event shows
// in the view at once and stays after the stream confirms it.
func TestSessionContractState(t *testing.T) {
	type desk struct {
		Flagged []string `json:"flagged"`
	}
	contract, err := protocol.AgentContract(protocol.ContractOptions{Name: gatewaytest.Agent,
		Events: map[string]protocol.Schema{"ticket.flagged": nil},
		Reducer: protocol.NewReducer("desk.v1", desk{Flagged: []string{}}, func(d desk, ev protocol.Event) desk {
			if ev.Type == "ticket.flagged" {
				d.Flagged = append(append([]string{}, d.Flagged...), string(ev.Payload))
			}
			return d
		})})
	if err != nil {
		t.Fatal(err)
	}
	n := gatewaytest.Start(t, gatewaytest.Options{Agent: func(o *actors.AgentOptions) { o.Name, o.Contract = "", contract }})
	h, url := newHoldingProxy(t, n)
	c := newClient(t, url, client.Options{Contract: contract})
	s := open(t, c, "s1")
	h.hold.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := s.Push(testContext(t), protocol.Event{ID: "flag-1", Type: "ticket.flagged", Payload: json.RawMessage(`"T-1"`)})
		done <- err
	}()
	flagged := func() []string {
		v, err := s.View()
		if err != nil {
			t.Fatal(err)
		}
		return v.App.(desk).Flagged
	}
	waitView(t, s, "the pending event", func(*protocol.AIState) bool { return len(flagged()) == 1 })
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for ch := s.Changed(); ; ch = s.Changed() {
		if _, index := s.Confirmed(); index == 2 { // ai.session.created, then the event
			break
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the stream did not bring the event back")
		}
	}
	if got := flagged(); len(got) != 1 || got[0] != `"T-1"` || len(s.Pending()) != 0 {
		t.Fatalf("flagged %v, %d pending", got, len(s.Pending()))
	}
}
