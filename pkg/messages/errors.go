package messages

import (
	"errors"
	"fmt"
)

// ErrInvalidToken is returned when a session ID, tool ID or other subject
// token does not match ^[A-Za-z0-9_-]{1,64}$.
var ErrInvalidToken = errors.New("invalid subject token")

// ErrInvalidPlanID is returned when a plan ID is not a UUID.
var ErrInvalidPlanID = errors.New("invalid plan ID")

// ErrInvalidToolPath is returned when a toolPath is not of a form §3 allows.
var ErrInvalidToolPath = errors.New("invalid toolPath")

// ErrProtocol is the sentinel every *ProtocolError matches: a line a script
// wrote on stdout that is not a valid protocol event.
var ErrProtocol = errors.New("protocol error")

// ErrInvalidPlan is the sentinel every *PlanError matches.
var ErrInvalidPlan = errors.New("invalid plan")

// ErrInvalidPrompt is the sentinel every *PromptError matches.
var ErrInvalidPrompt = errors.New("invalid prompt")

// ErrInvalidRequest is the sentinel every *RequestError matches: a
// client's approval, session reset, plan control request or context reply
// that is not what its schema says.
var ErrInvalidRequest = errors.New("invalid request")

// ErrInvalidManifest is the sentinel every *ManifestError matches.
var ErrInvalidManifest = errors.New("invalid skill manifest")

// ErrBadReference is returned when a "$ref" in a tool's input cannot be
// parsed or resolved.
var ErrBadReference = errors.New("bad reference")

// TokenError says which kind of token was rejected and why.
type TokenError struct {
	// Kind names the token, e.g. "sessionId" or "toolId".
	Kind string
	// Value is the rejected value, truncated to 80 bytes.
	Value string
	// Tenant says the value had to be a tenant's session,
	// <tenant>.<session>.
	Tenant bool
}

// Error implements error.
func (e *TokenError) Error() string {
	if e.Tenant {
		return fmt.Sprintf("%s %q must be <tenant>.<session>, each matching ^[A-Za-z0-9_-]{1,64}$", e.Kind, e.Value)
	}
	return fmt.Sprintf("%s %q must match ^[A-Za-z0-9_-]{1,64}$", e.Kind, e.Value)
}

// Unwrap returns ErrInvalidToken.
func (e *TokenError) Unwrap() error { return ErrInvalidToken }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
