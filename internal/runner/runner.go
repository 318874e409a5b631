// Package runner runs one attempt of a skill script and applies the tool
// protocol's rules (docs/spec.md §5) to what it emits. Two implementations share
// one set of rules: ProcessRunner (the real one: an OS process in its own
// process group, NDJSON on stdout) and InProcessRunner (Go functions, for
// embedding and benchmarks).
package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Defaults of Limits and Invocation.
const (
	// MaxLineBytesDefault is the longest stdout line accepted.
	MaxLineBytesDefault = 1 << 20
	// MaxStdoutBytesDefault bounds all stdout of one attempt.
	MaxStdoutBytesDefault = 4 << 20
	// MaxStderrTailDefault is how much of stderr's end is kept.
	MaxStderrTailDefault = 8 << 10
	// MaxEventsDefault bounds the events of one attempt.
	MaxEventsDefault = 10_000
	// MaxPatchBytesDefault bounds the state_patch lines of one attempt: a
	// session's state is shared by every tool of every plan of the
	// session, and committed with history.
	MaxPatchBytesDefault = 256 << 10
	// KillGraceDefault is the wait between SIGTERM and SIGKILL.
	KillGraceDefault = 2 * time.Second
	// TimeoutDefault bounds an attempt whose invocation names no timeout.
	TimeoutDefault = messages.ToolTimeoutDefault
	// DrainGraceDefault is how long stdout is still read after the script
	// exited, when something else holds it open.
	DrainGraceDefault = 300 * time.Millisecond
)

// Limits bound what one attempt may produce; going over a limit ends the
// attempt with a clear error, so no script can exhaust the worker's memory.
type Limits struct {
	// MaxLineBytes is the longest stdout line. Default 1 MiB.
	MaxLineBytes int `yaml:"maxLineBytes"`
	// MaxStdoutBytes bounds all stdout of an attempt. Default 4 MiB.
	MaxStdoutBytes int64 `yaml:"maxStdoutBytes"`
	// MaxStderrTail is how much of stderr's end is kept. Default 8 KiB.
	MaxStderrTail int `yaml:"maxStderrTail"`
	// MaxEvents bounds the events of an attempt. Default 10000.
	MaxEvents int `yaml:"maxEvents"`
	// MaxPatchBytes bounds the bytes of an attempt's state_patch lines.
	// Default 256 KiB.
	MaxPatchBytes int64 `yaml:"maxPatchBytes"`
	// KillGrace is the wait between SIGTERM and SIGKILL. Default 2s.
	KillGrace time.Duration `yaml:"killGrace"`
}

// WithDefaults fills zero fields.
func (l Limits) WithDefaults() Limits {
	l.MaxLineBytes = cmp.Or(l.MaxLineBytes, MaxLineBytesDefault)
	l.MaxStdoutBytes = cmp.Or(l.MaxStdoutBytes, MaxStdoutBytesDefault)
	l.MaxStderrTail = cmp.Or(l.MaxStderrTail, MaxStderrTailDefault)
	l.MaxEvents = cmp.Or(l.MaxEvents, MaxEventsDefault)
	l.MaxPatchBytes = cmp.Or(l.MaxPatchBytes, MaxPatchBytesDefault)
	l.KillGrace = cmp.Or(l.KillGrace, KillGraceDefault)
	return l
}

// Invocation is one attempt of one script.
type Invocation struct {
	// Skill and Script name the script.
	Skill, Script string
	// Dir is the skill folder, the process's working directory.
	Dir string
	// Path is the executable (process runner only).
	Path string
	// Env holds the variables the skill's config allows, added to the
	// minimal environment.
	Env map[string]string
	// Input is written to the script's stdin.
	Input messages.ScriptInput
	// Timeout bounds the attempt; 0 means TimeoutDefault.
	Timeout time.Duration
	// Resources are the attempt's kernel limits (process runner only);
	// unset fields take the runner's, then AttemptLimitsDefault.
	Resources messages.ResourceLimits
}

// Result is what an attempt produced.
type Result struct {
	// State is ToolSuccess, ToolFailed or ToolTimeout.
	State messages.ToolState
	// Done is the done event, if one came.
	Done *messages.DoneEvent
	// Events are the valid events up to and including done, as emitted.
	Events []json.RawMessage
	// Error says why the attempt did not succeed.
	Error *messages.ToolError
	// ExitCode is the process's exit code, -1 when it was killed or never started.
	ExitCode int
	// Duration is how long the attempt took.
	Duration time.Duration
	// StartLatency is the time to start the process.
	StartLatency time.Duration
	// StderrTail is the end of stderr.
	StderrTail string
}

// EventFunc receives each valid event as soon as its line is read, in
// order, never concurrently.
type EventFunc func(ev messages.Event, raw json.RawMessage)

// Runner runs attempts. Run never returns an error: every failure is in
// the Result. ctx cancellation ends the script (category cancelled).
type Runner interface {
	Run(ctx context.Context, inv Invocation, onEvent EventFunc) Result
}

// lines applies the protocol rules to a script's output, line by line:
// one implementation for both runners.
type lines struct {
	limits  Limits
	onEvent EventFunc
	events  []json.RawMessage
	done    *messages.DoneEvent
	lastErr string
	count   int
	bytes   int64
	patches int64
}

// line handles one stdout line (without its newline). A non-nil error ends
// the attempt.
func (h *lines) line(b []byte) *messages.ToolError {
	h.bytes += int64(len(b)) + 1
	if h.bytes > h.limits.MaxStdoutBytes {
		return &messages.ToolError{Code: "stdout_limit", Category: messages.CategoryProcessError,
			Message: fmt.Sprintf("script wrote more than %d bytes on stdout (limits.maxStdoutBytes)", h.limits.MaxStdoutBytes)}
	}
	if h.done != nil {
		return nil // events after done are ignored
	}
	if len(trimSpace(b)) == 0 {
		return nil
	}
	ev, err := messages.DecodeEvent(b)
	if err != nil {
		return &messages.ToolError{Code: "protocol_error", Category: messages.CategoryInvalidJSON, Message: err.Error()}
	}
	h.count++
	if h.count > h.limits.MaxEvents {
		return &messages.ToolError{Code: "event_limit", Category: messages.CategoryProcessError,
			Message: fmt.Sprintf("script emitted more than %d events (limits.maxEvents)", h.limits.MaxEvents)}
	}
	raw := json.RawMessage(append([]byte(nil), trimSpace(b)...))
	h.events = append(h.events, raw)
	switch e := ev.(type) {
	case *messages.DoneEvent:
		h.done = e
	case *messages.ErrorEvent:
		h.lastErr = e.ErrorCode + ": " + e.ErrorMessage
	case *messages.StatePatchEvent:
		if h.patches += int64(len(raw)); h.patches > h.limits.MaxPatchBytes {
			return &messages.ToolError{Code: "state_limit", Category: messages.CategoryProcessError,
				Message: fmt.Sprintf("script's state patches are more than %d bytes (limits.maxPatchBytes): the session state is shared; keep large data in assets", h.limits.MaxPatchBytes)}
		}
	}
	if h.onEvent != nil {
		h.onEvent(ev, raw)
	}
	return nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\r' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// verdict applies the exit rules of §5 once the script ended normally.
func (h *lines) verdict(exitCode int) (messages.ToolState, *messages.ToolError) {
	switch {
	case exitCode != 0:
		msg := fmt.Sprintf("script exited with code %d", exitCode)
		if h.lastErr != "" {
			msg += " (last error: " + h.lastErr + ")"
		}
		return messages.ToolFailed, &messages.ToolError{Code: "exit_code", Category: messages.CategoryToolFailure, Message: msg,
			Details: map[string]any{"exitCode": exitCode}}
	case h.done == nil:
		return messages.ToolFailed, &messages.ToolError{Code: "no_done", Category: messages.CategoryToolFailure,
			Message: "script exited without a done event"}
	case !h.done.OK:
		msg := h.done.Summary
		if msg == "" {
			msg = h.lastErr
		}
		if msg == "" {
			msg = "script reported failure"
		}
		return messages.ToolFailed, &messages.ToolError{Code: "done_not_ok", Category: messages.CategoryToolFailure, Message: msg}
	}
	return messages.ToolSuccess, nil
}
