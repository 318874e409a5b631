package skillworker

import (
	"context"
	"log/slog"
	"sync"
)

// lazyAttrs returns base with attrs added, as base.With(attrs...) does,
// but the handler is given the attrs only when the logger first logs
// something it enables. A job's logger carries five attributes, and a
// JSON or text handler formats them when they are added: for every job,
// though most jobs log nothing (about 4 µs per tool of figure 9).
func lazyAttrs(base *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	return slog.New(&lazyHandler{base: base.Handler(), attrs: attrs})
}

// lazyHandler is a handler whose attributes are handed to base on first
// use.
type lazyHandler struct {
	base  slog.Handler
	attrs []slog.Attr
	once  sync.Once
	with  slog.Handler
}

func (h *lazyHandler) handler() slog.Handler {
	h.once.Do(func() { h.with = h.base.WithAttrs(h.attrs) })
	return h.with
}

// Enabled implements slog.Handler.
func (h *lazyHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.base.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *lazyHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *lazyHandler) WithAttrs(attrs []slog.Attr) slog.Handler { return h.handler().WithAttrs(attrs) }

// WithGroup implements slog.Handler.
func (h *lazyHandler) WithGroup(name string) slog.Handler { return h.handler().WithGroup(name) }
