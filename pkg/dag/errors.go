package dag

import (
	"errors"
	"fmt"
	"strings"
)

// ErrDuplicateID means two tools of the plan share an ID. Build keeps the
// first and reports each later one as a *DuplicateIDError.
var ErrDuplicateID = errors.New("duplicate tool ID")

// ErrUnknownDependency means a tool depends on an ID that no tool of the
// plan has. Build reports it as an *UnknownDependencyError.
var ErrUnknownDependency = errors.New("unknown dependency")

// ErrSelfDependency means a tool lists itself among its dependencies. Build
// reports it as a *SelfDependencyError.
var ErrSelfDependency = errors.New("self-dependency")

// ErrCycle means the dependencies form a cycle, so no order can run them.
// Build reports it as a *CycleError.
var ErrCycle = errors.New("dependency cycle")

// ErrRefNotAncestor means a tool's input references ("$id") a tool that is
// not one of its transitive dependencies, so its output may not exist when
// the tool runs. Build reports it as a *RefError.
var ErrRefNotAncestor = errors.New("reference to a tool that is not an ancestor")

// ErrUnknownTool means a Tracker was given an ID that is not a tool of its
// graph.
var ErrUnknownTool = errors.New("unknown tool")

// ErrNotReady means Tracker.Start (or Tracker.Finish with FailedOptional)
// was called for a pending tool whose dependencies have not all finished
// successfully or optionally.
var ErrNotReady = errors.New("tool is not ready")

// ErrAlreadyStarted means Tracker.Start was called for a tool that is
// already running.
var ErrAlreadyStarted = errors.New("tool already started")

// ErrNotRunning means Tracker.Finish reported a success for a tool that
// never started.
var ErrNotRunning = errors.New("tool is not running")

// ErrAlreadyFinished means the tool already has an outcome (or was
// skipped); a scheduler sees it for duplicate outcomes and may ignore it.
var ErrAlreadyFinished = errors.New("tool already finished")

// ErrInvalidOutcome means Tracker.Finish was given a value that is not one
// of the Outcome constants.
var ErrInvalidOutcome = errors.New("invalid outcome")

// ErrInvalidState means Graph.RestoreTracker was given a value that is not
// one of the NodeState constants.
var ErrInvalidState = errors.New("invalid tool state")

// ErrInconsistentState means Graph.RestoreTracker was given states no run
// can produce: a tool running or finished as Succeeded or FailedOptional
// while one of its dependencies was skipped. It is reported as a
// *RestoreError.
var ErrInconsistentState = errors.New("inconsistent tool states")

// DuplicateIDError is a tool whose ID an earlier tool of the plan already
// has. It matches ErrDuplicateID.
type DuplicateIDError struct {
	// ID is the repeated tool ID.
	ID string
	// Index is the plan index of the repeat, which Build drops.
	Index int
	// First is the plan index of the tool that keeps the ID.
	First int
}

// Error names the ID and both plan indexes.
func (e *DuplicateIDError) Error() string {
	return fmt.Sprintf("tool %q is defined more than once (first at index %d, again at index %d)", e.ID, e.First, e.Index)
}

// Unwrap returns ErrDuplicateID, so errors.Is(err, ErrDuplicateID) holds.
func (e *DuplicateIDError) Unwrap() error { return ErrDuplicateID }

// UnknownDependencyError is a dependency on an ID no tool of the plan has.
// It matches ErrUnknownDependency.
type UnknownDependencyError struct {
	// ID is the tool that declares the dependency.
	ID string
	// Dep is the dependency that names no tool.
	Dep string
}

// Error names the tool and the missing dependency.
func (e *UnknownDependencyError) Error() string {
	return fmt.Sprintf("tool %q depends on %q, which is not a tool of the plan", e.ID, e.Dep)
}

// Unwrap returns ErrUnknownDependency, so errors.Is(err, ErrUnknownDependency) holds.
func (e *UnknownDependencyError) Unwrap() error { return ErrUnknownDependency }

// SelfDependencyError is a tool that lists itself among its dependencies.
// It matches ErrSelfDependency.
type SelfDependencyError struct {
	// ID is the tool that depends on itself.
	ID string
}

// Error names the tool.
func (e *SelfDependencyError) Error() string {
	return fmt.Sprintf("tool %q depends on itself", e.ID)
}

// Unwrap returns ErrSelfDependency, so errors.Is(err, ErrSelfDependency) holds.
func (e *SelfDependencyError) Unwrap() error { return ErrSelfDependency }

// CycleError is one cycle of dependencies. It matches ErrCycle.
//
// Path starts and ends with the same tool, the one of the cycle that comes
// first in the plan. Each arrow reads "is needed before": in a -> b, b
// depends on a. So the plan {a needs c, b needs a, c needs b} renders as
// "cycle: a -> b -> c -> a".
type CycleError struct {
	// Path lists the tool IDs around the cycle; the first and last are equal.
	Path []string
}

// Error renders the cycle, e.g. "cycle: a -> b -> c -> a".
func (e *CycleError) Error() string { return "cycle: " + strings.Join(e.Path, " -> ") }

// Unwrap returns ErrCycle, so errors.Is(err, ErrCycle) holds.
func (e *CycleError) Unwrap() error { return ErrCycle }

// RefError is a reference ("$ref") in a tool's input to a tool that is not
// one of its ancestors: a sibling, a dependent, the tool itself, or an ID
// no tool has. It matches ErrRefNotAncestor.
type RefError struct {
	// ID is the tool whose input holds the reference.
	ID string
	// Ref is the referenced tool ID, without the "$".
	Ref string
	// Unknown is true when no tool of the plan has the ID Ref.
	Unknown bool
}

// Error names the tool and the reference.
func (e *RefError) Error() string {
	if e.Unknown {
		return fmt.Sprintf("tool %q: input references \"$%s\", which is not a tool of the plan", e.ID, e.Ref)
	}
	return fmt.Sprintf("tool %q: input references \"$%s\", which is not an ancestor of %q", e.ID, e.Ref, e.ID)
}

// Unwrap returns ErrRefNotAncestor, so errors.Is(err, ErrRefNotAncestor) holds.
func (e *RefError) Unwrap() error { return ErrRefNotAncestor }

// StateError is a Tracker call refused because of the tool's state, or an
// unknown tool or bad value. It matches its Err (ErrUnknownTool,
// ErrNotReady, ErrAlreadyStarted, ErrNotRunning, ErrAlreadyFinished,
// ErrInvalidOutcome or ErrInvalidState).
type StateError struct {
	// Op is the refused operation: "start", "finish" or "restore".
	Op string
	// ID is the tool the operation was about.
	ID string
	// State is the tool's state when the call was refused (for "restore",
	// the value given); meaningless with ErrUnknownTool.
	State NodeState
	// Err is the sentinel that says why.
	Err error
}

// Error names the operation, the tool, the reason and the state.
func (e *StateError) Error() string {
	if errors.Is(e.Err, ErrUnknownTool) {
		return fmt.Sprintf("%s tool %q: %v", e.Op, e.ID, e.Err)
	}
	return fmt.Sprintf("%s tool %q: %v (state %s)", e.Op, e.ID, e.Err, e.State)
}

// Unwrap returns Err.
func (e *StateError) Unwrap() error { return e.Err }

// RestoreError is a persisted state that no run can produce: a tool that
// is running, or finished as Succeeded or FailedOptional, although one of
// its dependencies was skipped. It matches ErrInconsistentState.
type RestoreError struct {
	// ID is the tool whose state cannot be.
	ID string
	// State is that tool's state.
	State NodeState
	// Dep is the first dependency, in plan order, that does not allow it.
	Dep string
	// DepState is Dep's state.
	DepState NodeState
}

// Error names both tools and their states.
func (e *RestoreError) Error() string {
	return fmt.Sprintf("restore tool %q: it is %s but its dependency %q is %s", e.ID, e.State, e.Dep, e.DepState)
}

// Unwrap returns ErrInconsistentState, so errors.Is(err, ErrInconsistentState) holds.
func (e *RestoreError) Unwrap() error { return ErrInconsistentState }
