package planfsm

import (
	"errors"
	"fmt"
)

// Intake is the scheduler's decision on one plan message, as a pure
// function: the shell (Scheduler.onPlanMsg) holds an IntakeFacts, asks
// DecideIntake what to do, carries out that one move, writes what it learnt
// into the facts and asks again, until the move settles the message. The
// facts are gathered in one fixed order — the plan checked (with its
// session), the partition's term, an actor running it, its stored result,
// its stored record, its size, room in the bucket — each only when the
// decision needs it, and every path ends in exactly one settlement (ack,
// nak, nak later, term, or left to the next owner).
//
// One rule makes a plan idempotent: before a plan is written, its stored
// result and its stored record are read, whatever the message (a first
// delivery, a redelivery, a plan the narrator published again). A finished
// plan's result outlives its keys, so a plan is never run twice however
// late its message comes back; a record with nothing running it is
// recovered, never written over.

// IntakeMove is what DecideIntake asks the shell to do next.
type IntakeMove uint8

// The moves. The first group gathers a fact or does a step and decides
// again; the second settles the message and ends the intake.
const (
	// MoveCheck checks the plan (its limits, its skills, its session
	// against the subject's) and sets Checked, Invalid, WorkerMayWait and
	// Unaddressable.
	MoveCheck IntakeMove = iota + 1
	// MoveReadOwner sets Owner (the partition's term is still held).
	MoveReadOwner
	// MoveReadActor sets Running (an actor of this scheduler runs the plan).
	MoveReadActor
	// MoveReadResult looks the plan's result up in the results stream.
	MoveReadResult
	// MoveReadRecord reads the plan's record key in the plans bucket.
	MoveReadRecord
	// MoveMeasure measures the record against the store's largest message.
	MoveMeasure
	// MoveAdmit asks the room gate for the record's room (held until the
	// actor ends).
	MoveAdmit
	// MoveReject publishes the invalid plan's result (or, for a plan
	// without a usable ID, reports it on the session's unaddressed
	// subject) and sets Answered.
	MoveReject
	// MoveRefuse publishes the plan's storage_refused result and sets
	// Answered.
	MoveRefuse
	// MoveRecover recovers the partition's plans from their records and
	// sets Recovered.
	MoveRecover
	// MoveWrite writes the record (through the partition's writer, behind
	// its fence) and sets Written.
	MoveWrite

	// MoveStart starts the plan's actor and acknowledges the message
	// (until the server confirms).
	MoveStart
	// MoveAck acknowledges the message: the plan runs, ran, or has its
	// answer.
	MoveAck
	// MoveNak asks for the message again at once.
	MoveNak
	// MoveNakLater asks for the message again after a delay.
	MoveNakLater
	// MoveWaitForWorker asks for the message again after the worker wait's
	// step: a skill of the plan has no live worker yet.
	MoveWaitForWorker
	// MoveTerm ends the message's deliveries: it can never be read.
	MoveTerm
	// MoveLeave settles nothing: this scheduler lost the partition, and
	// the message comes back to its next owner after the ack wait.
	MoveLeave
)

// Settles reports whether the move ends the intake.
func (m IntakeMove) Settles() bool { return m >= MoveStart }

var moveNames = [...]string{"", "check", "read_owner", "read_actor", "read_result", "read_record", "measure", "admit",
	"reject", "refuse", "recover", "write", "start", "ack", "nak", "nak_later", "wait_for_worker", "term", "leave"}

// String names the move as logs and metrics do.
func (m IntakeMove) String() string {
	if int(m) < len(moveNames) && m > 0 {
		return moveNames[m]
	}
	return fmt.Sprintf("IntakeMove(%d)", m)
}

// Read is what a read of the store said.
type Read uint8

// The reads.
const (
	// Unread: not read yet.
	Unread Read = iota
	// Absent: read, not there.
	Absent
	// Present: read, there.
	Present
	// ReadFailed: the read failed (the store unreachable or slow).
	ReadFailed
)

// Outcome is how a step that writes went.
type Outcome uint8

// The outcomes.
const (
	// NotDone: the step has not been taken.
	NotDone Outcome = iota
	// Done: it was carried out.
	Done
	// Failed: it failed and may be tried again (the message is asked for
	// again).
	Failed
	// Fenced: the write was refused by the partition's fence: another
	// scheduler owns the partition now.
	Fenced
	// StoreRefused: the store refused the write for good (the bucket full
	// past what the room gate counted).
	StoreRefused
)

// IntakeFacts is what the shell learnt of one plan message so far. The
// zero value is a message nothing is known of.
type IntakeFacts struct {
	// Checked: the plan was checked. Invalid is its problem (nil: valid);
	// WorkerMayWait, when Invalid, says the only problem is a skill
	// without a live worker and the message's wait for one is not spent;
	// Unaddressable says the plan has no usable ID, so no result can be
	// addressed to it.
	Checked, WorkerMayWait, Unaddressable bool
	Invalid                               error

	// Owner (read when OwnerRead): the partition's term is held.
	OwnerRead, Owner bool
	// Running (read when ActorRead): an actor of this scheduler runs it.
	ActorRead, Running bool

	// Result and Record are the two reads of the idempotence rule.
	Result, Record Read

	// Measured: the record was measured; TooLarge is why the store could
	// never take it (nil: it fits).
	Measured bool
	TooLarge error
	// Admitted: the room gate answered; NoRoom is its refusal (nil: room
	// held for the plan).
	Admitted bool
	NoRoom   error

	// Answered: the reject's or the refusal's result was published.
	Answered Outcome
	// Recovered: the partition's recovery.
	Recovered Outcome
	// Written: the record's write; WriteErr is the store's refusal when
	// Written is StoreRefused.
	Written  Outcome
	WriteErr error
}

// IntakeDecision is one answer of DecideIntake.
type IntakeDecision struct {
	// Move is what to do.
	Move IntakeMove
	// Why says, for logs and metrics, why the intake settles as it does
	// ("duplicate", "finished", "invalid", …); empty for a gathering move.
	Why string
	// Refusal, with MoveRefuse, is what is refused — "record" (the store
	// could never take it) or "plan" (no room, or the store refused the
	// write) — and Cause the error the result names.
	Refusal string
	Cause   error
}

// Reasons an intake settles as it does (IntakeDecision.Why).
const (
	WhyStarted       = "started"
	WhyInvalid       = "invalid"
	WhyUnaddressable = "unaddressable"
	WhyWaitForWorker = "wait_for_worker"
	WhyNotOwner      = "not_owner"
	WhyDuplicate     = "duplicate"
	WhyFinished      = "finished"
	WhyRecovered     = "recovered"
	WhyRefused       = "refused"
	WhyReadFailed    = "read_failed"
	WhyAnswerFailed  = "answer_failed"
	WhyRecoverFailed = "recover_failed"
	WhyWriteFailed   = "write_failed"
)

func gather(m IntakeMove) IntakeDecision { return IntakeDecision{Move: m} }

func settle(m IntakeMove, why string) IntakeDecision { return IntakeDecision{Move: m, Why: why} }

// DecideIntake is the intake's whole rule: from what is known of a plan
// message it returns the next move. It is total (every IntakeFacts has an
// answer) and deterministic; the facts it has not asked for are ignored.
func DecideIntake(f IntakeFacts) IntakeDecision {
	if !f.Checked {
		return gather(MoveCheck)
	}
	if f.Invalid != nil {
		return decideInvalid(f)
	}
	if !f.OwnerRead {
		return gather(MoveReadOwner)
	}
	if !f.Owner {
		return settle(MoveLeave, WhyNotOwner)
	}
	if !f.ActorRead {
		return gather(MoveReadActor)
	}
	if f.Running {
		return settle(MoveAck, WhyDuplicate)
	}
	// The idempotence rule: the result, then the record, for every message.
	switch f.Result {
	case Unread:
		return gather(MoveReadResult)
	case ReadFailed:
		return settle(MoveNak, WhyReadFailed)
	case Present:
		return settle(MoveAck, WhyFinished)
	}
	switch f.Record {
	case Unread:
		return gather(MoveReadRecord)
	case ReadFailed:
		return settle(MoveNak, WhyReadFailed)
	case Present:
		return decideRecover(f)
	}
	if !f.Measured {
		return gather(MoveMeasure)
	}
	if f.TooLarge != nil {
		return decideRefuse(f, "record", f.TooLarge)
	}
	if !f.Admitted {
		return gather(MoveAdmit)
	}
	if f.NoRoom != nil {
		return decideRefuse(f, "plan", f.NoRoom)
	}
	return decideWrite(f)
}

// decideInvalid answers a plan that failed its check: it waits for a
// worker while it may, else it is rejected with its result — by the
// partition's owner only (a scheduler paused past its lease may see every
// worker gone; the next owner judges the plan on its own view).
func decideInvalid(f IntakeFacts) IntakeDecision {
	if f.WorkerMayWait {
		return settle(MoveWaitForWorker, WhyWaitForWorker)
	}
	if !f.OwnerRead {
		return gather(MoveReadOwner)
	}
	if !f.Owner {
		return settle(MoveLeave, WhyNotOwner)
	}
	switch f.Answered {
	case NotDone:
		return gather(MoveReject)
	case Done:
		if f.Unaddressable {
			return settle(MoveTerm, WhyUnaddressable)
		}
		return settle(MoveAck, WhyInvalid)
	default:
		if f.Unaddressable {
			// Reported as well as it could be; the message can never be
			// read, so it is not asked for again.
			return settle(MoveTerm, WhyUnaddressable)
		}
		return settle(MoveNak, WhyAnswerFailed)
	}
}

// decideRecover answers a plan whose record is stored while nothing here
// runs it: an owner that lost the partition wrote it after this term's
// recovery read the bucket. The partition's plans are recovered from their
// records (never the record written over, never dropped as a duplicate).
func decideRecover(f IntakeFacts) IntakeDecision {
	switch f.Recovered {
	case NotDone:
		return gather(MoveRecover)
	case Done:
		return settle(MoveAck, WhyRecovered)
	default:
		return settle(MoveNakLater, WhyRecoverFailed)
	}
}

// decideRefuse answers a plan the store cannot or will not take with its
// storage_refused result.
func decideRefuse(f IntakeFacts, what string, cause error) IntakeDecision {
	switch f.Answered {
	case NotDone:
		return IntakeDecision{Move: MoveRefuse, Refusal: what, Cause: cause}
	case Done:
		return IntakeDecision{Move: MoveAck, Why: WhyRefused, Refusal: what, Cause: cause}
	default:
		return IntakeDecision{Move: MoveNakLater, Why: WhyAnswerFailed, Refusal: what, Cause: cause}
	}
}

// decideWrite writes the record and starts the plan once it is stored.
func decideWrite(f IntakeFacts) IntakeDecision {
	switch f.Written {
	case NotDone:
		return gather(MoveWrite)
	case Done:
		return settle(MoveStart, WhyStarted)
	case Fenced:
		return settle(MoveLeave, WhyNotOwner)
	case StoreRefused:
		cause := f.WriteErr
		if cause == nil {
			cause = errStoreRefused
		}
		return decideRefuse(f, "plan", fmt.Errorf("the plan's record was refused: %w", cause))
	default:
		return settle(MoveNak, WhyWriteFailed)
	}
}

var errStoreRefused = errors.New("the store refused the write")
