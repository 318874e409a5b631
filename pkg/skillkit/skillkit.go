// Package skillkit helps write Narratoria skill scripts in Go: it reads the
// invocation from stdin, hands it to your function, and writes protocol
// events (version "0", one JSON object per line) to stdout. Any language
// works for a skill; this package only saves Go authors the plumbing.
//
//	func main() {
//		skillkit.Main(func(ctx context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
//			out.Log("info", "hello")
//			return out.Done(true, "greeted", map[string]any{"narration": "Hello!"})
//		})
//	}
package skillkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/narratoria/runtime/pkg/messages"
)

// Invocation is the decoded stdin of a script (docs/spec.md §5).
type Invocation struct {
	messages.ScriptInput
	// Dir is the skill folder (the working directory).
	Dir string
}

// DecodeInput unmarshals the tool input into v.
func (in *Invocation) DecodeInput(v any) error {
	if len(in.Input) == 0 {
		return nil
	}
	return json.Unmarshal(in.Input, v)
}

// DecodeState unmarshals the session state into v.
func (in *Invocation) DecodeState(v any) error {
	if len(in.State) == 0 {
		return nil
	}
	return json.Unmarshal(in.State, v)
}

// DecodeConfig unmarshals the skill's settings into v.
func (in *Invocation) DecodeConfig(v any) error {
	if len(in.Config) == 0 {
		return nil
	}
	return json.Unmarshal(in.Config, v)
}

// Emitter writes protocol events. It is safe for concurrent use.
type Emitter struct {
	mu    sync.Mutex
	w     *bufio.Writer
	ended bool
}

// NewEmitter writes events to w.
func NewEmitter(w io.Writer) *Emitter { return &Emitter{w: bufio.NewWriter(w)} }

// Emit writes one event and flushes it, so the worker sees it at once.
func (e *Emitter) Emit(ev messages.Event) error {
	line, err := messages.EncodeEvent(ev)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(append(line, '\n')); err != nil {
		return err
	}
	return e.w.Flush()
}

// Log emits a log event (level debug, info, warn or error).
func (e *Emitter) Log(level, message string) error {
	return e.Emit(&messages.LogEvent{Level: level, Message: message})
}

// Patch emits a state_patch deep-merged into the session state.
func (e *Emitter) Patch(patch map[string]any) error {
	return e.Emit(&messages.StatePatchEvent{Patch: patch})
}

// Asset emits an asset event for a file the script wrote.
func (e *Emitter) Asset(id, kind, mediaType, path string) error {
	return e.Emit(&messages.AssetEvent{AssetID: id, Kind: kind, MediaType: mediaType, Path: path})
}

// UI emits a ui_event with a payload marshalled to JSON.
func (e *Emitter) UI(event string, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encode %s payload: %w", event, err)
	}
	return e.Emit(&messages.UIEvent{Event: event, Payload: b})
}

// Error emits an error event; it does not end the invocation.
func (e *Emitter) Error(code, message string) error {
	return e.Emit(&messages.ErrorEvent{ErrorCode: code, ErrorMessage: message})
}

// Done emits the done event; output (marshalled to a JSON object) is what
// dependents see as "$toolId". Only the first call has an effect.
func (e *Emitter) Done(ok bool, summary string, output any) error {
	return e.done(&messages.DoneEvent{OK: ok, Summary: summary}, output)
}

// done emits d with output as its output, once.
func (e *Emitter) done(d *messages.DoneEvent, output any) error {
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return nil
	}
	e.ended = true
	e.mu.Unlock()
	if output != nil {
		b, err := json.Marshal(output)
		if err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		d.Output = b
	}
	return e.Emit(d)
}

// AskForContext ends the invocation like Done(true, …) and asks the
// scheduler for more context (§9.1): the plan pauses once its running
// tools finish, a planner is asked for more steps with suggestion as the
// hint (e.g. "recall what happened before with the knight"), and the steps
// it adds run after this tool, reading its output. Only the first Done or
// AskForContext has an effect.
func (e *Emitter) AskForContext(summary, suggestion string, output any) error {
	return e.done(&messages.DoneEvent{OK: true, Summary: summary, NeedsMoreContext: true, ContextSuggestion: suggestion}, output)
}

// Func is a skill script's body.
type Func func(ctx context.Context, in *Invocation, out *Emitter) error

// ErrUsage marks an error caused by the input; Run reports it as a failed
// done (exit 0) rather than a crash (exit 1).
var ErrUsage = errors.New("bad input")

// Run reads the invocation from r, calls fn and writes events to w. It
// returns the process exit code: 0 when fn returned nil or an ErrUsage
// error (then reported with an error event and done ok:false), 1 otherwise.
func Run(ctx context.Context, r io.Reader, w io.Writer, fn Func) int {
	out := NewEmitter(w)
	var in Invocation
	dec := json.NewDecoder(io.LimitReader(r, 64<<20))
	if err := dec.Decode(&in.ScriptInput); err != nil {
		_ = out.Error("bad_stdin", "cannot read the invocation on stdin: "+err.Error())
		_ = out.Done(false, "cannot read the invocation", nil)
		return 0
	}
	in.Dir, _ = os.Getwd()
	err := fn(ctx, &in, out)
	switch {
	case err == nil:
		_ = out.Done(true, "", nil)
		return 0
	case errors.Is(err, ErrUsage):
		_ = out.Error("bad_input", err.Error())
		_ = out.Done(false, err.Error(), nil)
		return 0
	default:
		_ = out.Error("failed", err.Error())
		return 1
	}
}

// Main runs fn as the process's script and exits with Run's code. SIGTERM
// cancels the context.
func Main(fn Func) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := Run(ctx, os.Stdin, os.Stdout, fn)
	stop()
	os.Exit(code)
}
