package skillkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

func events(t *testing.T, out string) []messages.Event {
	var evs []messages.Event
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		ev, err := messages.DecodeEvent([]byte(l))
		require.NoError(t, err, l)
		evs = append(evs, ev)
	}
	return evs
}

func TestRun(t *testing.T) {
	in := `{"requestId":"r","sessionId":"s","toolId":"t","input":{"n":2},"state":{"k":"v"},"config":{"c":true}}`
	var out bytes.Buffer
	code := Run(context.Background(), strings.NewReader(in), &out, func(_ context.Context, inv *Invocation, e *Emitter) error {
		var input struct{ N int }
		var state struct{ K string }
		var cfg struct{ C bool }
		require.NoError(t, inv.DecodeInput(&input))
		require.NoError(t, inv.DecodeState(&state))
		require.NoError(t, inv.DecodeConfig(&cfg))
		require.Equal(t, 2, input.N)
		require.Equal(t, "v", state.K)
		require.True(t, cfg.C)
		require.NoError(t, e.Log("info", "hi"))
		require.NoError(t, e.Patch(map[string]any{"n": input.N}))
		require.NoError(t, e.UI("dice_roll", map[string]int{"total": 3}))
		require.NoError(t, e.Asset("a", "image", "image/svg+xml", "data/a.svg"))
		require.NoError(t, e.Done(true, "ok", map[string]int{"n": input.N}))
		return e.Done(false, "ignored", nil) // only the first done counts
	})
	require.Equal(t, 0, code)
	evs := events(t, out.String())
	require.Len(t, evs, 5)
	require.JSONEq(t, `{"n":2}`, string(evs[4].(*messages.DoneEvent).Output))

	out.Reset()
	code = Run(context.Background(), strings.NewReader(in), &out, func(context.Context, *Invocation, *Emitter) error {
		return fmt.Errorf("%w: formula missing", ErrUsage)
	})
	require.Equal(t, 0, code, "a usage error is a failed done, not a crash")
	evs = events(t, out.String())
	require.Equal(t, messages.EventError, evs[0].Type())
	require.False(t, evs[1].(*messages.DoneEvent).OK)

	out.Reset()
	code = Run(context.Background(), strings.NewReader(in), &out, func(context.Context, *Invocation, *Emitter) error {
		return errors.New("disk on fire")
	})
	require.Equal(t, 1, code)
	require.Contains(t, out.String(), "disk on fire")

	out.Reset()
	code = Run(context.Background(), strings.NewReader("not json"), &out, func(context.Context, *Invocation, *Emitter) error {
		t.Fatal("not called")
		return nil
	})
	require.Equal(t, 0, code)
	require.Contains(t, out.String(), "bad_stdin")
}

func ExampleEmitter_Done() {
	e := NewEmitter(stdoutWriter{})
	_ = e.Done(true, "rolled", map[string]int{"total": 17})
	// Output: {"version":"0","type":"done","ok":true,"summary":"rolled","output":{"total":17}}
}

type stdoutWriter struct{}

func (stdoutWriter) Write(p []byte) (int, error) { fmt.Print(string(p)); return len(p), nil }
