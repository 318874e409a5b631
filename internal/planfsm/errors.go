package planfsm

import (
	"errors"
	"fmt"

	"github.com/narratoria/runtime/pkg/messages"
)

// ErrIllegalTransition is matched by every *TransitionError.
var ErrIllegalTransition = errors.New("illegal tool transition")

// ErrNotAwaitingApproval: an approval named a tool that is not waiting for one.
var ErrNotAwaitingApproval = errors.New("tool is not awaiting approval")

// ErrUnknownTool: an event named a tool the plan does not have.
var ErrUnknownTool = errors.New("unknown tool")

// TransitionError is a move the tool state machine refuses.
type TransitionError struct {
	// ToolID is the tool.
	ToolID string
	// From and To are the states.
	From, To messages.ToolState
	// Why is what asked for the move.
	Why string
}

// Error renders "tool x: running -> pending refused (why)".
func (e *TransitionError) Error() string {
	return fmt.Sprintf("tool %s: %s -> %s refused (%s)", e.ToolID, e.From, e.To, e.Why)
}

// Unwrap returns ErrIllegalTransition.
func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }

// ErrRefusedMove: the machine asked itself for a move its rules refuse (a
// bug in the machine, never in the input). Step returns it; the
// simulation fails on it.
var ErrRefusedMove = errors.New("planfsm: the machine refused its own move")

// ErrPlanOver: the plan already finished; it cannot be cancelled.
var ErrPlanOver = errors.New("plan already finished")

// PhaseError is a change of the plan's phase the machine refuses.
type PhaseError struct {
	// From and To are the phases.
	From, To Phase
	// Why is what asked for the change.
	Why string
}

// Error renders "plan phase running -> published refused (why)".
func (e *PhaseError) Error() string {
	return fmt.Sprintf("plan phase %s -> %s refused (%s)", e.From, e.To, e.Why)
}

// Unwrap returns ErrIllegalTransition.
func (e *PhaseError) Unwrap() error { return ErrIllegalTransition }
