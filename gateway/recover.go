package gateway

import (
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/a2-runtime/a2/telemetry"
)

// serveObserved wraps the routes with what every request gets: its server
// span (continuing a caller's W3C traceparent), the request-duration
// metric by route and status, and panic recovery.
//
// recoverPanics turns a panic of a handler into a logged 500 answer, so
// that one request cannot take the node down. It should never fire: client
// input is answered 4xx by construction. http.ErrAbortHandler is let
// through, as net/http expects.
func (g *Gateway) serveObserved(next http.Handler) http.Handler {
	return g.observe(g.recoverPanics(next))
}

// observe starts the request's server span and records its duration. The
// route is the mux's pattern (set on the request once it is routed), so
// the span's name and the metric's http.route never carry an ID.
func (g *Gateway) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := telemetry.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
		tw := &trackingWriter{ResponseWriter: w}
		r = r.WithContext(ctx)
		defer func() {
			status := tw.status
			if status == 0 {
				status = http.StatusOK
			}
			route := r.Pattern
			if route == "" || route == "/" {
				route = "unmatched"
			}
			attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
				attribute.Int("http.response.status_code", status)}
			telemetry.Metrics().HTTPDuration.Record(ctx, time.Since(began).Seconds(), metric.WithAttributes(attrs...))
			if span.IsRecording() {
				span.SetName(r.Method + " " + route)
				span.SetAttributes(attrs...)
				if s := r.PathValue("session"); s != "" {
					span.SetAttributes(attribute.String(telemetry.GenAIConversationID, s))
				}
				if a := r.PathValue("agent"); a != "" {
					span.SetAttributes(attribute.String(telemetry.GenAIAgentName, a))
				}
				if status >= 500 {
					span.SetStatus(codes.Error, strconv.Itoa(status))
				}
				if status >= 400 {
					span.SetAttributes(attribute.String(telemetry.ErrorType, strconv.Itoa(status)))
				}
			}
			span.End()
		}()
		next.ServeHTTP(tw, r)
	})
}

// recoverPanics: see serveObserved.
func (g *Gateway) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw, ok := w.(*trackingWriter)
		if !ok {
			tw = &trackingWriter{ResponseWriter: w}
		}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.opts.Logger.ErrorContext(r.Context(), "gateway: panic serving a request", "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if !tw.wroteHeader {
				writeError(tw, errorf(http.StatusInternalServerError, CodeInternal, "", "internal error"))
			}
		}()
		next.ServeHTTP(tw, r)
	})
}

// trackingWriter records whether the header was written, and its status;
// Unwrap lets http.ResponseController reach the connection (flush, write
// deadlines).
type trackingWriter struct {
	http.ResponseWriter
	wroteHeader bool
	status      int
}

func (t *trackingWriter) WriteHeader(code int) {
	if !t.wroteHeader {
		t.status = code
	}
	t.wroteHeader = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	if !t.wroteHeader {
		t.status = http.StatusOK
	}
	t.wroteHeader = true
	return t.ResponseWriter.Write(b)
}

// Unwrap returns the underlying writer (for http.ResponseController).
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
