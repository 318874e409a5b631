package dag

import (
	"errors"
	"fmt"
	"strings"
)

// ErrDuplicateID: two tools share an ID.
var ErrDuplicateID = errors.New("duplicate tool ID")

// ErrUnknownDependency: a tool depends on an ID no tool has.
var ErrUnknownDependency = errors.New("unknown dependency")

// ErrSelfDependency: a tool depends on itself.
var ErrSelfDependency = errors.New("self-dependency")

// ErrCycle: the dependencies form a cycle.
var ErrCycle = errors.New("dependency cycle")

// ErrRefNotAncestor: a tool's input references a tool that is not one of
// its ancestors.
var ErrRefNotAncestor = errors.New("reference to a non-ancestor")

// ErrUnknownTool: the tracker was asked about an ID the graph lacks.
var ErrUnknownTool = errors.New("unknown tool")

// ErrNotReady: Start of a tool whose dependencies have not finished, or
// that already started.
var ErrNotReady = errors.New("tool is not ready")

// ErrAlreadyFinished: Finish of a tool that already finished (e.g. a
// duplicate outcome).
var ErrAlreadyFinished = errors.New("tool already finished")

// DuplicateIDError names a repeated ID and the index of the repeat.
type DuplicateIDError struct {
	ID    string
	Index int
}

// Error names the duplicate.
func (e *DuplicateIDError) Error() string {
	return fmt.Sprintf("tool %q is defined more than once (again at index %d)", e.ID, e.Index)
}

// Unwrap returns ErrDuplicateID.
func (e *DuplicateIDError) Unwrap() error { return ErrDuplicateID }

// UnknownDependencyError names the tool and the missing dependency.
type UnknownDependencyError struct {
	ID, Dep string
}

// Error names the tool and the missing dependency.
func (e *UnknownDependencyError) Error() string {
	return fmt.Sprintf("tool %q depends on %q, which is not a tool of the plan", e.ID, e.Dep)
}

// Unwrap returns ErrUnknownDependency.
func (e *UnknownDependencyError) Unwrap() error { return ErrUnknownDependency }

// SelfDependencyError names a tool that depends on itself.
type SelfDependencyError struct {
	ID string
}

// Error names the tool.
func (e *SelfDependencyError) Error() string { return fmt.Sprintf("tool %q depends on itself", e.ID) }

// Unwrap returns ErrSelfDependency.
func (e *SelfDependencyError) Unwrap() error { return ErrSelfDependency }

// CycleError names a cycle. Path starts and ends with the same tool; each
// arrow follows a dependency: "a -> b" means a depends on b.
type CycleError struct {
	Path []string
}

// Error renders the cycle, e.g. "cycle: a -> b -> a".
func (e *CycleError) Error() string { return "cycle: " + strings.Join(e.Path, " -> ") }

// Unwrap returns ErrCycle.
func (e *CycleError) Unwrap() error { return ErrCycle }

// RefError names a tool whose input references a non-ancestor.
type RefError struct {
	ID, Ref string
}

// Error names the tool and the reference.
func (e *RefError) Error() string {
	return fmt.Sprintf("tool %q: input references \"$%s\", which is not an ancestor of %q", e.ID, e.Ref, e.ID)
}

// Unwrap returns ErrRefNotAncestor.
func (e *RefError) Unwrap() error { return ErrRefNotAncestor }
