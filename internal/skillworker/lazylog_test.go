package skillworker

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLazyAttrsLogsAsWith: a logger of lazyAttrs writes what base.With
// writes, the attributes in order and before later ones, and its handler
// gets them only once something is logged.
func TestLazyAttrsLogsAsWith(t *testing.T) {
	var want, got bytes.Buffer
	opts := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	attrs := []slog.Attr{slog.String("planId", "p"), slog.Int("attempt", 2)}
	eager := slog.New(slog.NewJSONHandler(&want, opts)).With("planId", "p", "attempt", 2)
	lazy := lazyAttrs(slog.New(slog.NewJSONHandler(&got, opts)), attrs...)
	h := lazy.Handler().(*lazyHandler)
	lazy.Debug("below the level: nothing formatted")
	require.Nil(t, h.with, "nothing logged yet: the attributes are not handed over")
	for _, l := range []*slog.Logger{eager, lazy} {
		l.Info("one", "k", "v")
		l.With("more", 1).WithGroup("g").Warn("two", "x", true)
	}
	require.NotEmpty(t, want.String())
	require.Equal(t, want.String(), got.String())
}
