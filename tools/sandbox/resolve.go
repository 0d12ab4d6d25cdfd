package sandbox

import (
	"context"
	"fmt"
	"time"
)

// Resolver resolves a session's sandbox (the reference's HarnessSandbox):
// the same one for a session every time, safe for concurrent calls
// (Pool.Sandbox is one). A2 never closes what it returns.
type Resolver func(ctx context.Context, session string) (Sandbox, error)

// resolveWaits are the waits before the second and third tries of a
// resolver that failed.
var resolveWaits = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond}

// Resolve calls r for session, and again when it fails (three tries in
// all, 100 and 400 ms apart, while ctx lasts): a resolver failure fails
// the attempt, which A2 retries (R-HARNESS-24), so a sandbox service that
// hiccups does not fail the turn. The error names the tries and the last
// failure.
func Resolve(ctx context.Context, r Resolver, session string) (Sandbox, error) {
	var err error
	for try := 0; ; try++ {
		var sb Sandbox
		if sb, err = r(ctx, session); err == nil {
			if sb == nil {
				return nil, fmt.Errorf("the session's sandbox: the resolver returned none")
			}
			return sb, nil
		}
		if try == len(resolveWaits) || ctx.Err() != nil {
			return nil, fmt.Errorf("the session's sandbox (%d tries): %w", try+1, err)
		}
		select {
		case <-time.After(resolveWaits[try]):
		case <-ctx.Done():
			return nil, fmt.Errorf("the session's sandbox (%d tries): %w", try+1, err)
		}
	}
}
