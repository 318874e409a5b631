package planfsm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecideIntake is the intake's table: every decision, from the facts
// that lead to it.
func TestDecideIntake(t *testing.T) {
	t.Parallel()
	bad := errors.New("tool t1: no such skill")
	big := errors.New("record of 9 MB, the store takes 1 MB")
	full := errors.New("the plans bucket is full")
	// valid is a valid plan of an owner with nothing running it, nothing
	// stored of it, that fits and has room: the facts before the write.
	valid := IntakeFacts{Checked: true, OwnerRead: true, Owner: true, ActorRead: true,
		Result: Absent, Record: Absent, Measured: true, Admitted: true}
	with := func(f func(*IntakeFacts)) IntakeFacts {
		v := valid
		f(&v)
		return v
	}
	for _, tc := range []struct {
		name    string
		facts   IntakeFacts
		want    IntakeMove
		why     string
		refusal string
	}{
		{"nothing known: check the plan", IntakeFacts{}, MoveCheck, "", ""},
		{"valid: whose partition", IntakeFacts{Checked: true}, MoveReadOwner, "", ""},
		{"valid, not the owner: left to the next", IntakeFacts{Checked: true, OwnerRead: true}, MoveLeave, WhyNotOwner, ""},
		{"owner: is it running here", IntakeFacts{Checked: true, OwnerRead: true, Owner: true}, MoveReadActor, "", ""},
		{"running here: a duplicate", IntakeFacts{Checked: true, OwnerRead: true, Owner: true, ActorRead: true, Running: true}, MoveAck, WhyDuplicate, ""},
		{"not running: look its result up", with(func(f *IntakeFacts) { f.Result, f.Record, f.Measured, f.Admitted = Unread, Unread, false, false }), MoveReadResult, "", ""},
		{"result unreadable: again", with(func(f *IntakeFacts) { f.Result = ReadFailed }), MoveNak, WhyReadFailed, ""},
		{"result stored: finished, never run again", with(func(f *IntakeFacts) { f.Result = Present }), MoveAck, WhyFinished, ""},
		{"no result: read its record", with(func(f *IntakeFacts) { f.Record, f.Measured, f.Admitted = Unread, false, false }), MoveReadRecord, "", ""},
		{"record unreadable: again", with(func(f *IntakeFacts) { f.Record = ReadFailed }), MoveNak, WhyReadFailed, ""},
		{"record stored, nothing runs it: recover", with(func(f *IntakeFacts) { f.Record = Present }), MoveRecover, "", ""},
		{"recovered", with(func(f *IntakeFacts) { f.Record, f.Recovered = Present, Done }), MoveAck, WhyRecovered, ""},
		{"recovery failed: later", with(func(f *IntakeFacts) { f.Record, f.Recovered = Present, Failed }), MoveNakLater, WhyRecoverFailed, ""},
		{"new: measure its record", with(func(f *IntakeFacts) { f.Measured, f.Admitted = false, false }), MoveMeasure, "", ""},
		{"too large for the store: refuse", with(func(f *IntakeFacts) { f.TooLarge = big }), MoveRefuse, "", "record"},
		{"too large, answered", with(func(f *IntakeFacts) { f.TooLarge, f.Answered = big, Done }), MoveAck, WhyRefused, "record"},
		{"too large, answer failed", with(func(f *IntakeFacts) { f.TooLarge, f.Answered = big, Failed }), MoveNakLater, WhyAnswerFailed, "record"},
		{"fits: ask for room", with(func(f *IntakeFacts) { f.Admitted = false }), MoveAdmit, "", ""},
		{"no room: refuse", with(func(f *IntakeFacts) { f.NoRoom = full }), MoveRefuse, "", "plan"},
		{"no room, answered", with(func(f *IntakeFacts) { f.NoRoom, f.Answered = full, Done }), MoveAck, WhyRefused, "plan"},
		{"room: write", valid, MoveWrite, "", ""},
		{"written: start", with(func(f *IntakeFacts) { f.Written = Done }), MoveStart, WhyStarted, ""},
		{"write fenced: the partition is another's", with(func(f *IntakeFacts) { f.Written = Fenced }), MoveLeave, WhyNotOwner, ""},
		{"write failed: again", with(func(f *IntakeFacts) { f.Written = Failed }), MoveNak, WhyWriteFailed, ""},
		{"write refused by the store: refuse", with(func(f *IntakeFacts) { f.Written, f.WriteErr = StoreRefused, full }), MoveRefuse, "", "plan"},
		{"write refused, answered", with(func(f *IntakeFacts) { f.Written, f.Answered = StoreRefused, Done }), MoveAck, WhyRefused, "plan"},
		{"invalid, a worker may still come: wait", IntakeFacts{Checked: true, Invalid: bad, WorkerMayWait: true}, MoveWaitForWorker, WhyWaitForWorker, ""},
		{"invalid: whose partition", IntakeFacts{Checked: true, Invalid: bad}, MoveReadOwner, "", ""},
		{"invalid, not the owner: left", IntakeFacts{Checked: true, Invalid: bad, OwnerRead: true}, MoveLeave, WhyNotOwner, ""},
		{"invalid, owner: reject", IntakeFacts{Checked: true, Invalid: bad, OwnerRead: true, Owner: true}, MoveReject, "", ""},
		{"rejected", IntakeFacts{Checked: true, Invalid: bad, OwnerRead: true, Owner: true, Answered: Done}, MoveAck, WhyInvalid, ""},
		{"reject's result not published: again", IntakeFacts{Checked: true, Invalid: bad, OwnerRead: true, Owner: true, Answered: Failed}, MoveNak, WhyAnswerFailed, ""},
		{"no usable ID, reported: terminated", IntakeFacts{Checked: true, Invalid: bad, Unaddressable: true, OwnerRead: true, Owner: true, Answered: Done}, MoveTerm, WhyUnaddressable, ""},
		{"no usable ID, report failed: terminated all the same", IntakeFacts{Checked: true, Invalid: bad, Unaddressable: true, OwnerRead: true, Owner: true, Answered: Failed}, MoveTerm, WhyUnaddressable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideIntake(tc.facts)
			require.Equal(t, tc.want.String(), d.Move.String())
			require.Equal(t, tc.why, d.Why)
			require.Equal(t, tc.refusal, d.Refusal)
			if tc.refusal != "" {
				require.Error(t, d.Cause)
			}
			require.Equal(t, tc.why != "", d.Move.Settles(), "a decision with a reason settles the message")
		})
	}
}

// TestDecideIntakeIsTotal: from any facts at all, the moves DecideIntake
// asks for, each carried out with any outcome, end in one settlement
// within as many moves as there are facts — never a loop, never a move
// asked twice.
func TestDecideIntakeIsTotal(t *testing.T) {
	t.Parallel()
	outcomes := []Outcome{Done, Failed, Fenced, StoreRefused}
	reads := []Read{Absent, Present, ReadFailed}
	var walk func(f IntakeFacts, seen map[IntakeMove]bool, depth int)
	paths := 0
	walk = func(f IntakeFacts, seen map[IntakeMove]bool, depth int) {
		d := DecideIntake(f)
		if d.Move.Settles() {
			paths++
			require.NotEmpty(t, d.Why, "settled without a reason: %+v", f)
			return
		}
		require.False(t, seen[d.Move], "move %s asked twice: %+v", d.Move, f)
		require.Less(t, depth, 12)
		next := map[IntakeMove]bool{d.Move: true}
		for m := range seen {
			next[m] = true
		}
		for _, g := range learn(f, d.Move, outcomes, reads) {
			walk(g, next, depth+1)
		}
	}
	walk(IntakeFacts{}, map[IntakeMove]bool{}, 0)
	require.Greater(t, paths, 20)
}

// learn is every way a move's outcome may change the facts.
func learn(f IntakeFacts, m IntakeMove, outcomes []Outcome, reads []Read) []IntakeFacts {
	var out []IntakeFacts
	add := func(g func(*IntakeFacts)) {
		v := f
		g(&v)
		out = append(out, v)
	}
	switch m {
	case MoveCheck:
		add(func(v *IntakeFacts) { v.Checked = true })
		add(func(v *IntakeFacts) { v.Checked, v.Invalid = true, errors.New("bad") })
		add(func(v *IntakeFacts) { v.Checked, v.Invalid, v.WorkerMayWait = true, errors.New("no worker"), true })
		add(func(v *IntakeFacts) { v.Checked, v.Invalid, v.Unaddressable = true, errors.New("no id"), true })
	case MoveReadOwner:
		add(func(v *IntakeFacts) { v.OwnerRead, v.Owner = true, true })
		add(func(v *IntakeFacts) { v.OwnerRead = true })
	case MoveReadActor:
		add(func(v *IntakeFacts) { v.ActorRead, v.Running = true, true })
		add(func(v *IntakeFacts) { v.ActorRead = true })
	case MoveReadResult, MoveReadRecord:
		for _, r := range reads {
			add(func(v *IntakeFacts) {
				if m == MoveReadResult {
					v.Result = r
				} else {
					v.Record = r
				}
			})
		}
	case MoveMeasure:
		add(func(v *IntakeFacts) { v.Measured = true })
		add(func(v *IntakeFacts) { v.Measured, v.TooLarge = true, errors.New("big") })
	case MoveAdmit:
		add(func(v *IntakeFacts) { v.Admitted = true })
		add(func(v *IntakeFacts) { v.Admitted, v.NoRoom = true, errors.New("full") })
	case MoveReject, MoveRefuse:
		for _, o := range outcomes[:2] {
			add(func(v *IntakeFacts) { v.Answered = o })
		}
	case MoveRecover:
		for _, o := range outcomes[:2] {
			add(func(v *IntakeFacts) { v.Recovered = o })
		}
	case MoveWrite:
		for _, o := range outcomes {
			add(func(v *IntakeFacts) { v.Written = o })
		}
	}
	return out
}
