// Joining: the seeds tried in turn, each with its own deadline, until one
// answers (provider.go has the provider's overview).

package gossip

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// joinAll joins cfg.Join: every round tries each address once; it succeeds
// once a round reached any node, fails at once on a refusal, and otherwise
// retries with backoff until the join timeout or ctx.
func (p *Provider) joinAll(ctx context.Context, ml *memberlist.Memberlist) error {
	addrs := p.cfg.Join
	if len(addrs) == 0 {
		return nil
	}
	deadline := time.Now().Add(p.cfg.JoinTimeout)
	backoff := joinBackoffFirst
	var lastErr error
	for attempt := 1; ; attempt++ {
		joined := 0
		for _, addr := range addrs {
			n, err := p.joinOne(ctx, ml, addr, deadline)
			var refused *refusal
			if errors.As(err, &refused) {
				return fmt.Errorf("gossip: join %s refused: %w", addr, refused)
			}
			if err != nil {
				if lastErr == nil || !errors.Is(err, errJoinDeadline) {
					lastErr = fmt.Errorf("%s: %w", addr, err)
				}
				if ctx.Err() != nil || !time.Now().Before(deadline) {
					break
				}
				continue
			}
			joined += n
		}
		if joined > 0 {
			p.log.Info("gossip: joined", "addresses", addrs, "attempts", attempt)
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("gossip: join %s: %w (last error: %v)", strings.Join(addrs, ", "), err, lastErr)
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return fmt.Errorf("gossip: join %s: no node answered within %s (%d attempts; last error: %v)",
				strings.Join(addrs, ", "), p.cfg.JoinTimeout, attempt, lastErr)
		}
		p.log.Debug("gossip: join: no node answered, retrying", "addresses", addrs, "attempt", attempt, "in", min(backoff, remaining), "error", lastErr)
		t := time.NewTimer(min(backoff, remaining))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, joinBackoffMax)
	}
}

var errJoinDeadline = errors.New("join timeout reached")

// joinOne joins one address, bounded by deadline and ctx (memberlist's own
// Join cannot be cancelled: when abandoned, it finishes in the background on
// a memberlist that the caller shuts down). A refusal by our MergeDelegate
// during this join is returned as a *refusal.
func (p *Provider) joinOne(ctx context.Context, ml *memberlist.Memberlist, addr string, deadline time.Time) (int, error) {
	p.nodesMu.Lock()
	p.joinRefusals = p.joinRefusals[:0]
	p.nodesMu.Unlock()

	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		n, err := ml.Join([]string{addr})
		ch <- result{n, err}
	}()
	// An attempt started at the deadline (the last one) still gets a moment.
	t := time.NewTimer(max(time.Until(deadline), joinAttemptGrace))
	defer t.Stop()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
		return 0, errJoinDeadline
	}
	if r.err == nil && r.n > 0 {
		return r.n, nil
	}
	if r.err == nil {
		r.err = errors.New("no node answered")
	}
	// Our MergeDelegate's error is in Join's error text exactly when it
	// refused this join (refusals recorded meanwhile may come from nodes
	// that join us).
	msg := r.err.Error()
	p.nodesMu.Lock()
	defer p.nodesMu.Unlock()
	for _, e := range p.joinRefusals {
		if strings.Contains(msg, e.Error()) {
			return 0, e
		}
	}
	// memberlist's multierror spans lines: keep one line, without its header.
	msg = strings.Join(strings.Fields(msg), " ")
	msg = strings.TrimPrefix(msg, "1 error occurred: * ")
	return 0, errors.New(msg)
}
