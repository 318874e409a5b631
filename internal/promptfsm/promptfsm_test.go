package promptfsm

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// TestUnexpectedEventsRefused: an event the phase does not take is an
// error naming both, and changes nothing; so is any event after the end.
func TestUnexpectedEventsRefused(t *testing.T) {
	now := time.Now()
	m := New(Config{}, Prompt{Key: "s.p"})
	_, err := m.Step(now, Published{})
	var ue *UnexpectedError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, PhaseNew, ue.Phase)
	require.ErrorIs(t, err, ErrUnexpected)
	_, err = m.Step(now, Failed{Err: errors.New("x")})
	require.ErrorIs(t, err, ErrUnexpected, "nothing to fail before the start")

	effs, err := m.Step(now, Begin{})
	require.NoError(t, err)
	require.Equal(t, []Effect{LoadAttempt{Key: "s.p"}}, effs, "the attempt record first, the dedupe store after")
	_, err = m.Step(now, Awaited{})
	require.ErrorIs(t, err, ErrUnexpected)
	require.Equal(t, PhaseLoad, m.Phase())

	_, err = m.Step(now, Failed{Err: errors.New("timeout")})
	require.NoError(t, err)
	require.True(t, m.Done())
	_, err = m.Step(now, Begin{})
	require.ErrorIs(t, err, ErrUnexpected, "nothing after the end")
}

// TestOnePromptWithoutKey: a request without a promptId is planned, run,
// built and published, never looked up, recorded or claimed.
func TestOnePromptWithoutKey(t *testing.T) {
	now := time.Now()
	m := New(Config{MaxAttempts: 2}, Prompt{})
	effs, err := m.Step(now, Begin{})
	require.NoError(t, err)
	require.Equal(t, []Effect{Generate{Attempt: 1, Disabled: []string{}}}, effs)
	effs, err = m.Step(now, Generated{PlanID: "p1", Plan: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.IsType(t, SendPlan{}, effs[0])
	require.False(t, effs[0].(SendPlan).Again)
	effs, err = m.Step(now, PlanSent{})
	require.NoError(t, err)
	require.IsType(t, Await{}, effs[0])
	effs, err = m.Step(now, Awaited{Result: &messages.ExecutionResult{PlanID: "p1", CanReplan: true, DisabledSkills: []string{"dice"}}})
	require.NoError(t, err)
	require.Equal(t, Generate{Attempt: 2, Parent: "p1", Disabled: []string{"dice"}}, effs[0], "the failing skill is disabled for the replan")
	_, err = m.Step(now, Generated{PlanID: "p2", Plan: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, err = m.Step(now, PlanSent{})
	require.NoError(t, err)
	effs, err = m.Step(now, Awaited{})
	require.NoError(t, err)
	b := effs[0].(Build)
	require.Equal(t, VerdictFallback, b.Verdict, "two attempts failed: the template")
	require.Len(t, b.Trace, 2)
	require.Equal(t, messages.ReasonTimeout, b.Trace[1].FailureReason)
	effs, err = m.Step(now, Built{Narration: &messages.Narration{Fallback: true}})
	require.NoError(t, err)
	require.Equal(t, []Effect{Publish{Narration: &messages.Narration{Fallback: true}}}, effs)
	effs, err = m.Step(now, Published{})
	require.NoError(t, err)
	require.Equal(t, []Effect{Finish{Narration: &messages.Narration{Fallback: true}}}, effs)
}

// TestRefusedStoreAnswersThePublishedNarration: a narrator whose store
// refuses every write builds the template (storage_refused), cannot claim
// it, and publishes it only if the prompt has no narration out; when
// another narrator's is out, that one is the answer (simulation seed
// 131985 of make test-long: the requester got the template while the
// prompt's narration was the real one).
func TestRefusedStoreAnswersThePublishedNarration(t *testing.T) {
	now := time.Now()
	m := New(Config{MaxAttempts: 2}, Prompt{Key: "s.p"})
	_, err := m.Step(now, Begin{})
	require.NoError(t, err)
	effs, err := m.Step(now, Failed{Err: errors.New("maximum bytes exceeded"), Refused: true})
	require.NoError(t, err)
	b := effs[0].(Build)
	require.Equal(t, VerdictFallback, b.Verdict)
	require.Equal(t, messages.ReasonStorageRefused, b.Reason)
	template := &messages.Narration{Fallback: true}
	effs, err = m.Step(now, Built{Narration: template})
	require.NoError(t, err)
	require.IsType(t, Claim{}, effs[0])
	effs, err = m.Step(now, Failed{Err: errors.New("maximum bytes exceeded"), Refused: true})
	require.NoError(t, err)
	require.Equal(t, []Effect{Publish{Narration: template, IfMissing: true}}, effs)
	real := &messages.Narration{PlanID: "p1", Attempts: 1}
	effs, err = m.Step(now, Published{Earlier: real})
	require.NoError(t, err)
	require.Equal(t, []Effect{Finish{Narration: real, Duplicate: true}}, effs, "the narration out is the answer")
}

// TestTakeoverDecisions: a narrator that takes over a recorded attempt
// looks for its plan's result first, then whether the plan waits in the
// plans stream, and only then sends it again: a plan with a stored result
// or waiting to run is never sent again.
func TestTakeoverDecisions(t *testing.T) {
	now := time.Now()
	rec := &messages.PromptAttempt{Attempt: 2, PlanID: "p2", Plan: json.RawMessage(`{}`), DisabledSkills: []string{"dice"}}
	done := &messages.ExecutionResult{PlanID: "p2", Success: true}
	for _, c := range []struct {
		name   string
		events []Event
		want   []Effect // the effects of the last event
		phase  Phase
	}{
		{"result stored: built from it, never sent", []Event{ResultLooked{Result: done}}, nil, PhaseBuilding},
		{"no result: the plans stream is checked", []Event{ResultLooked{}}, []Effect{CheckPlan{Record: rec}}, PhaseChecking},
		{"waiting in the stream: awaited from the attempt's start, never sent", []Event{ResultLooked{}, PlanChecked{Waiting: true}},
			[]Effect{Await{Record: rec, FromStart: true}}, PhaseAwaiting},
		{"neither: sent again", []Event{ResultLooked{}, PlanChecked{}}, []Effect{SendPlan{Record: rec, Again: true}}, PhaseSending},
		{"sent again: awaited", []Event{ResultLooked{}, PlanChecked{}, PlanSent{}}, []Effect{Await{Record: rec}}, PhaseAwaiting},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := New(Config{MaxAttempts: 5}, Prompt{Key: "s.p"})
			_, err := m.Step(now, Begin{})
			require.NoError(t, err)
			effs, err := m.Step(now, AttemptLoaded{Record: rec, Revision: 3})
			require.NoError(t, err)
			require.Equal(t, []Effect{Resumed{Record: rec}, LookupResult{Record: rec}}, effs, "the result first")
			for _, ev := range c.events {
				effs, err = m.Step(now, ev)
				require.NoError(t, err)
			}
			require.Equal(t, c.phase, m.Phase())
			if c.want != nil {
				require.Equal(t, c.want, effs)
			}
			_, err = m.Step(now, Awaited{})
			if c.phase != PhaseAwaiting {
				require.ErrorIs(t, err, ErrUnexpected, "no wait before the plan is sent or found")
			}
		})
	}
}
