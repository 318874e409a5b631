// Package health is the skill health state machine of docs/spec.md §7: a pure
// transition function over (state, input) and a tracker keyed by session
// and skill. It knows nothing of NATS; the scheduler persists what it
// returns.
package health

import (
	"fmt"
	"time"
)

// State is a skill's health in one session.
type State string

// The four states.
const (
	Healthy          State = "healthy"
	Degraded         State = "degraded"
	TemporaryFailure State = "temporaryFailure"
	PermanentFailure State = "permanentFailure"
)

// Input is what can happen to a skill.
type Input string

// The five inputs.
const (
	// Success: an attempt succeeded.
	Success Input = "success"
	// Transient: an attempt timed out or its worker was lost.
	Transient Input = "transient"
	// Failure: an attempt failed any other way.
	Failure Input = "failure"
	// Exhausted: a tool spent all its retries.
	Exhausted Input = "exhausted"
	// Reset: the session was restarted.
	Reset Input = "reset"
)

// FailureThresholdDefault is the number of counted failures that moves a
// healthy skill to degraded, and a degraded one to permanentFailure.
const FailureThresholdDefault = 3

// ParseState parses a state name.
func ParseState(s string) (State, error) {
	switch st := State(s); st {
	case Healthy, Degraded, TemporaryFailure, PermanentFailure:
		return st, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownState, s)
}

// ParseInput parses an input name.
func ParseInput(s string) (Input, error) {
	switch in := Input(s); in {
	case Success, Transient, Failure, Exhausted, Reset:
		return in, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownInput, s)
}

// Status is a skill's health in one session, as stored in KV.
type Status struct {
	// State is the current state.
	State State `json:"state"`
	// Failures counts the consecutive counted failures in this state.
	Failures int `json:"failures"`
	// Reason says why the skill is in this state.
	Reason string `json:"reason,omitempty"`
	// Since is when the skill entered this state (zero for the initial state).
	Since time.Time `json:"since,omitzero"`
	// ProbeAt, in permanentFailure under a Policy with a cool-down, is when
	// the skill may be tried again (half-open, as a circuit breaker): from
	// then on it is selectable, a success makes it healthy and a failure
	// starts another cool-down. Zero: it waits for a session reset.
	ProbeAt time.Time `json:"probeAt,omitzero"`
}

// Selectable reports whether a planner may choose the skill at now: in any
// state but permanentFailure, and in permanentFailure once its cool-down
// is over (a probe).
func (s Status) Selectable(now time.Time) bool {
	return s.State != PermanentFailure || s.probing(now)
}

// probing reports whether a skill in permanentFailure is past its
// cool-down.
func (s Status) probing(now time.Time) bool {
	return s.State == PermanentFailure && !s.ProbeAt.IsZero() && !now.Before(s.ProbeAt)
}

// Policy is what Next does beyond §7's table.
type Policy struct {
	// Cooldown is how long a skill stays in permanentFailure before it is
	// probed (Status.ProbeAt); 0 keeps it there until a session reset.
	Cooldown time.Duration
}

// Transition is what applying an input did.
type Transition struct {
	// From and To are the states before and after.
	From, To State
	// Input is what was applied.
	Input Input
	// Failures is the count after the input.
	Failures int
	// Reason explains the transition.
	Reason string
	// Changed is true when the state changed.
	Changed bool
}

// Next applies one input to a status (§7) with no cool-down: a skill in
// permanentFailure stays there until a session reset. See Policy.Next.
func Next(s Status, in Input, reason string, now time.Time) (Status, Transition) {
	return Policy{}.Next(s, in, reason, now)
}

// Next applies one input to a status (§7). The failure count resets to 0
// whenever the state changes; reason is the caller's description of the
// input (e.g. "exit code 1") and is folded into the transition's reason.
// With a cool-down, a skill entering permanentFailure gets a ProbeAt; once
// it has passed, a success makes the skill healthy again and any failure
// starts another cool-down.
func (p Policy) Next(s Status, in Input, reason string, now time.Time) (Status, Transition) {
	if s.State == "" {
		s.State = Healthy
	}
	from := s.State
	to := from
	failures := s.Failures
	why := reason
	probeAt := s.ProbeAt
	probing := p.Cooldown > 0 && s.probing(now)
	switch in {
	case Reset:
		to, failures, why = Healthy, 0, "session reset"
	case Success:
		if from == PermanentFailure {
			if probing {
				to, failures, why = Healthy, 0, "a probe succeeded after the cool-down"
			}
			break
		}
		to, failures = Healthy, 0
	case Transient:
		switch from {
		case Healthy:
			to, failures = TemporaryFailure, 0
		case Degraded:
			failures++
			if failures >= FailureThresholdDefault {
				to, failures = PermanentFailure, 0
				why = fmt.Sprintf("%d more consecutive failures while degraded (last: %s)", FailureThresholdDefault, reason)
			}
		case TemporaryFailure, PermanentFailure:
			// §7: a transient failure leaves both where they are.
		}
	case Failure:
		switch from {
		case Healthy:
			failures++
			if failures >= FailureThresholdDefault {
				to, failures = Degraded, 0
				why = fmt.Sprintf("%d consecutive failures (last: %s)", FailureThresholdDefault, reason)
			}
		case Degraded:
			failures++
			if failures >= FailureThresholdDefault {
				to, failures = PermanentFailure, 0
				why = fmt.Sprintf("%d more consecutive failures while degraded (last: %s)", FailureThresholdDefault, reason)
			}
		case TemporaryFailure, PermanentFailure:
			// §7: a failure leaves both where they are.
		}
	case Exhausted:
		if from == TemporaryFailure {
			to, failures = PermanentFailure, 0
			why = "retries exhausted while in temporary failure (last: " + reason + ")"
		}
	}
	switch {
	case to != PermanentFailure:
		probeAt = time.Time{}
	case from != PermanentFailure && p.Cooldown > 0:
		probeAt = now.Add(p.Cooldown)
	case probing && in != Success:
		// The probe failed: another cool-down.
		probeAt = now.Add(p.Cooldown)
		why = "a probe failed (" + reason + "); probed again after the cool-down"
	}
	next := Status{State: to, Failures: failures, Reason: s.Reason, Since: s.Since, ProbeAt: probeAt}
	if to != from || !probeAt.Equal(s.ProbeAt) {
		next.Reason = why
	}
	if to != from {
		next.Since = now
	}
	return next, Transition{From: from, To: to, Input: in, Failures: failures, Reason: why, Changed: to != from}
}

// Selectable reports whether a planner may choose a skill in this state
// (never in permanentFailure; Status.Selectable knows the cool-down).
func (s State) Selectable() bool { return s != PermanentFailure }

// TimeoutFactor is how much longer a planner lets a skill in this state
// run: twice for degraded skills.
func (s State) TimeoutFactor() int {
	if s == Degraded {
		return 2
	}
	return 1
}

// Deprioritized reports whether a planner should prefer other skills
// (degraded ones).
func (s State) Deprioritized() bool { return s == Degraded }
