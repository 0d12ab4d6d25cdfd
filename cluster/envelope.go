package cluster

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/a2-runtime/a2/actors"
	"github.com/a2-runtime/a2/actors/sessionpb"
	"github.com/a2-runtime/a2/cluster/clusterpb"
	"github.com/a2-runtime/a2/internal/wire"
)

// Kinds of envelope (docs/cluster.md, "Messages between nodes").
const (
	kindPush      = "push"      // sessionpb.PushRequest -> sessionpb.PushResponse
	kindState     = "state"     // sessionpb.StateRequest -> sessionpb.StateResponse
	kindHistory   = "history"   // HistoryRequest -> HistoryResponse
	kindIdle      = "idle"      // IdleRequest -> IdleResponse
	kindSubscribe = "subscribe" // SubscribeRequest -> SubscribeResponse
	// SubscribeRequest -> SubscribeResponse: a stream that ends once its
	// session is idle (StreamBatch.idle)
	kindSubscribeIdle = "subscribe.idle"
	// PushStreamRequest -> sessionpb.PushResponse: a push and, once it is
	// durable, a subscribe.idle stream from its first event
	kindPushStream  = "push.stream"
	kindStreamBatch = "stream.batch" // StreamBatch, owner to subscriber
	kindStreamAck   = "stream.ack"   // StreamAck, subscriber to owner
	kindStreamEnd   = "stream.end"   // StreamEnd, either way
	kindActivate    = "activate"     // ActivateRequest -> ActivateResponse
	kindRelease     = "release"      // ReleaseRequest -> ReleaseResponse
	kindResult      = "result"       // the answer to a request: its response message
	kindError       = "error"        // the answer to a request that failed: sessionpb.Error
)

// Error codes of the cluster, besides the runtime's (wire.Code*, internal/wire).
const (
	codeUnsupported = "UNSUPPORTED"
	codeBadMessage  = "BAD_MESSAGE"
)

// wrap packs a message into an envelope.
func wrap(kind string, body proto.Message, deadline time.Time) *clusterpb.Envelope {
	b, _ := proto.Marshal(body) // our own messages always marshal
	env := &clusterpb.Envelope{Version: version, Kind: kind, Body: b}
	if !deadline.IsZero() {
		env.Deadline = deadline.UnixNano()
	}
	return env
}

// errorEnvelope is the answer to a request that failed.
func errorEnvelope(err error) *clusterpb.Envelope {
	return wrap(kindError, wire.ToPBError(err), time.Time{})
}

// badMessage answers an envelope that cannot be served.
func badMessage(code, format string, args ...any) *clusterpb.Envelope {
	return wrap(kindError, &sessionpb.Error{Code: code, Message: fmt.Sprintf(format, args...)}, time.Time{})
}

// check refuses an envelope of a newer version; nil if it can be served.
func check(env *clusterpb.Envelope) *clusterpb.Envelope {
	if env.Version > version {
		return badMessage(codeUnsupported, "envelope version %d is newer than this node's %d", env.Version, version)
	}
	return nil
}

// unwrap decodes an envelope's body into m; an error envelope to answer if
// it does not decode.
func unwrap(env *clusterpb.Envelope, m proto.Message) *clusterpb.Envelope {
	if err := proto.Unmarshal(env.Body, m); err != nil {
		return badMessage(codeBadMessage, "the body of a %q envelope does not decode: %v", env.Kind, err)
	}
	return nil
}

// deadlineOf is the envelope's deadline, or fallback from now when it has
// none.
func deadlineOf(env *clusterpb.Envelope, fallback time.Duration) time.Time {
	if env.Deadline > 0 {
		return time.Unix(0, env.Deadline)
	}
	return time.Now().Add(fallback)
}

// answer decodes the answer to a request: the response into out, or the
// error it carries (the runtime's sentinels and validation errors as on the
// node that sent it).
func answer(env *clusterpb.Envelope, out proto.Message) error {
	switch env.Kind {
	case kindResult:
		if err := proto.Unmarshal(env.Body, out); err != nil {
			return fmt.Errorf("%w: an answer does not decode: %v", actors.ErrUnavailable, err)
		}
		return nil
	case kindError:
		var e sessionpb.Error
		if err := proto.Unmarshal(env.Body, &e); err != nil {
			return fmt.Errorf("%w: an error answer does not decode: %v", actors.ErrUnavailable, err)
		}
		switch e.Code {
		case codeUnsupported, codeBadMessage:
			return fmt.Errorf("%w: %s", ErrUnsupported, e.Message)
		}
		return wire.FromPBError(&e)
	}
	return fmt.Errorf("%w: an answer of kind %q", ErrUnsupported, env.Kind)
}

// errMovedAway ends a stream whose session left this member.
var errMovedAway = actors.ErrMoved

// errSubscriberGone ends a stream whose subscriber's node left.
var errSubscriberGone = errors.New("cluster: the subscriber's node left the cluster")
