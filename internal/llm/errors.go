package llm

import (
	"errors"
	"fmt"

	"github.com/narratoria/runtime/pkg/messages"
)

// Kinds of failure (Error.Kind, the kind label of
// narratoria_llm_failures_total).
const (
	// KindHTTP: the server could not be reached, or answered a status
	// other than 200, 429 and 5xx.
	KindHTTP = "http"
	// KindRateLimited: the server answered 429.
	KindRateLimited = "rate_limited"
	// KindServer: the server answered 5xx, or an error event mid-stream.
	KindServer = "server_error"
	// KindTimeout: no answer (or no first token) in time.
	KindTimeout = "timeout"
	// KindCut: the stream ended before the answer did.
	KindCut = "cut"
	// KindJSON: the answer is not a chat completion, or not the JSON asked
	// for even after repair.
	KindJSON = "json"
	// KindBudget: the tenant's hourly token budget is spent; no call made.
	KindBudget = "budget"
)

// ErrBudget is matched by the error of a call refused for its tenant's
// token budget.
var ErrBudget = errors.New("token budget spent")

// Error is a failed model call, classified.
type Error struct {
	// Kind is one of the Kind constants.
	Kind string
	// Status is the HTTP status, when the server answered one.
	Status int
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *Error) Error() string { return "llm (" + e.Kind + "): " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// BudgetError says whose budget is spent and by how much.
type BudgetError struct {
	// Tenant is "" for a deployment without tenants.
	Tenant messages.Tenant
	// Limit is the budget per hour; Used what the last hour spent.
	Limit, Used int64
}

// Error implements error.
func (e *BudgetError) Error() string {
	who := "the deployment"
	if e.Tenant != "" {
		who = fmt.Sprintf("tenant %q", e.Tenant)
	}
	return fmt.Sprintf("%s spent %d model tokens in the last hour, over its budget of %d", who, e.Used, e.Limit)
}

// Is matches ErrBudget.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// KindOf is err's kind when it is an *Error, else "".
func KindOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}
