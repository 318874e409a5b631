package runner

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Func is a script body run in the worker's process: it reads in and emits
// events. Returning an error is a failed exit (like exit code 1); returning
// without a done event is a failure (no_done).
type Func func(ctx context.Context, in messages.ScriptInput, emit func(messages.Event) error) error

// InProcessRunner runs Go functions registered per "<skill>/<script>" with
// the same rules as the process runner. A function that ignores its
// context past the timeout is abandoned: the attempt ends at the deadline
// and the goroutine's late events are dropped.
type InProcessRunner struct {
	// Limits bound the attempt's output.
	Limits Limits

	mu    sync.RWMutex
	funcs map[string]Func
}

// NewInProcess returns an empty in-process runner.
func NewInProcess() *InProcessRunner { return &InProcessRunner{funcs: map[string]Func{}} }

// Register adds a script body.
func (r *InProcessRunner) Register(skill, script string, fn Func) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.funcs[skill+"/"+script] = fn
}

// Run implements Runner.
func (r *InProcessRunner) Run(ctx context.Context, inv Invocation, onEvent EventFunc) Result {
	began := time.Now()
	limits := r.Limits.WithDefaults()
	r.mu.RLock()
	fn, ok := r.funcs[inv.Skill+"/"+inv.Script]
	r.mu.RUnlock()
	if !ok {
		return Result{State: messages.ToolFailed, ExitCode: -1, Duration: time.Since(began), Error: &messages.ToolError{
			Code: "unknown_script", Category: messages.CategoryUnknownSkill, Message: fmt.Sprintf("no in-process script %s/%s", inv.Skill, inv.Script)}}
	}
	timeout := inv.Timeout
	if timeout <= 0 {
		timeout = TimeoutDefault
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The function's events are encoded, checked and passed on here, on
	// the caller's goroutine (one the worker keeps between jobs), not on
	// the function's: a new goroutine starts with a small stack, and this
	// work grew it by copying on every call (about a twentieth of the
	// worker's CPU in figure 9). emit hands each event over and waits for
	// the verdict; emits are taken one at a time.
	h := &lines{limits: limits, onEvent: onEvent}
	var limitErr *messages.ToolError
	events, verdict, gone := make(chan messages.Event), make(chan error, 1), make(chan struct{})
	var emitMu sync.Mutex
	emit := func(ev messages.Event) error {
		emitMu.Lock()
		defer emitMu.Unlock()
		select {
		case events <- ev:
			return <-verdict // a line taken is always answered
		case <-gone:
			return context.Canceled
		}
	}
	finished := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				finished <- &panicError{msg: fmt.Sprintf("script panicked: %v\n%s", p, debug.Stack())}
			}
		}()
		finished <- fn(rctx, inv.Input, emit)
	}()
	res := Result{ExitCode: -1, StartLatency: time.Since(began)}
	var fnErr error
	var ended bool
	for wait := true; wait; {
		select {
		case ev := <-events:
			b, err := messages.EncodeEvent(ev)
			switch {
			case err != nil:
			case limitErr != nil:
				err = limitErr
			default:
				if e := h.line(b); e != nil {
					limitErr, err = e, e
					cancel()
				}
			}
			verdict <- err
		case fnErr = <-finished:
			ended, wait = true, false
		case <-rctx.Done():
			wait = false
		}
	}
	close(gone) // later events (of a function abandoned) are dropped
	res.Done, res.Events = h.done, h.events
	res.Duration = time.Since(began)
	switch {
	case limitErr != nil:
		res.State, res.Error = messages.ToolFailed, limitErr
	case !ended && ctx.Err() != nil:
		res.State, res.Error = messages.ToolFailed, &messages.ToolError{Code: "cancelled", Category: messages.CategoryCancelled,
			Message: "script ended because its plan was cancelled or the worker is stopping"}
	case !ended:
		res.State, res.Error = messages.ToolTimeout, &messages.ToolError{Code: "timeout", Category: messages.CategoryTimeout,
			Message: fmt.Sprintf("script ran past its %s timeout", timeout)}
	case isPanic(fnErr):
		res.State, res.Error = messages.ToolFailed, &messages.ToolError{Code: "panic", Category: messages.CategoryProcessError, Message: fnErr.Error()}
	case fnErr != nil:
		res.ExitCode = 1
		res.State, res.Error = h.verdict(1)
		res.Error.Message += ": " + fnErr.Error()
	default:
		res.ExitCode = 0
		res.State, res.Error = h.verdict(0)
	}
	return res
}

// panicError carries a recovered panic of a script function.
type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

func isPanic(err error) bool {
	_, ok := err.(*panicError)
	return ok
}
