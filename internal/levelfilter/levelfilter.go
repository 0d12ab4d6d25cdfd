// Package levelfilter is a slog handler that drops the records below a
// level: the node shows the runtime's and protoactor's warnings and errors
// only, whatever level its own logger has.
package levelfilter

import (
	"context"
	"log/slog"
)

// Handler passes to the wrapped Handler the records at Min or above.
type Handler struct {
	slog.Handler
	Min slog.Level
}

// New returns a logger that logs through l's handler at min or above.
func New(l *slog.Logger, min slog.Level) *slog.Logger {
	return slog.New(&Handler{Handler: l.Handler(), Min: min})
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.Min && h.Handler.Enabled(ctx, l)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{Handler: h.Handler.WithAttrs(attrs), Min: h.Min}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{Handler: h.Handler.WithGroup(name), Min: h.Min}
}
