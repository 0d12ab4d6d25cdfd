package gateway

import (
	"net/http"
	"runtime/debug"
)

// recoverPanics turns a panic of a handler into a logged 500 answer, so
// that one request cannot take the node down. It should never fire: client
// input is answered 4xx by construction. http.ErrAbortHandler is let
// through, as net/http expects.
func (g *Gateway) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.opts.Logger.Error("gateway: panic serving a request", "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if !tw.wroteHeader {
				writeError(tw, errorf(http.StatusInternalServerError, CodeInternal, "", "internal error"))
			}
		}()
		next.ServeHTTP(tw, r)
	})
}

// trackingWriter records whether the header was written; Unwrap lets
// http.ResponseController reach the connection (flush, write deadlines).
type trackingWriter struct {
	http.ResponseWriter
	wroteHeader bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wroteHeader = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wroteHeader = true
	return t.ResponseWriter.Write(b)
}

// Unwrap returns the underlying writer (for http.ResponseController).
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
