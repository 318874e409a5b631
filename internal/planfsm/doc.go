// Package planfsm is the scheduler's rules, and nothing else: one plan's
// execution as an explicit, deterministic state machine (docs/spec.md §4, §9.2,
// §9.3).
//
// A Machine holds one plan's state. Step takes one Event (an outcome, a
// timer that fired, an approval, …) stamped with the time it happened and
// returns the Effects to carry out, in order: persist a tool record,
// dispatch an attempt, arm a timer, merge a state patch, publish progress,
// publish the result, purge. It has no goroutines, clocks, randomness or
// I/O: the scheduler's shell (internal/scheduler) owns the mailbox, the
// timers and NATS, and a simulation (sim_test.go) drives the same machine
// on a fake clock with crashes at every effect boundary.
//
// Every tool has one typed state (messages.ToolState), changed only by
// Machine.move, which refuses an illegal transition with a
// *TransitionError naming from, to and why. The dag.Tracker is the only
// graph state; the running and exclusive counts are kept by move.
//
// A tool:
//
//	pending ──ready, requiresApproval──▶ awaiting_approval ──approved──▶ pending
//	pending ──dispatch──▶ running ──success──▶ success
//	                      running ──failed, retries left, before deadline──▶ retrying ──due──▶ running
//	                      running ──failed: terminal, or retries spent──▶ failed | timeout
//	pending | awaiting_approval ──dependency failed, denied, plan deadline──▶ skipped
//	running | retrying ──plan deadline──▶ timeout
//
// A plan:
//
//	running ──every tool ended, or the deadline──▶ finished ──result stored──▶ published ──keys purged──▶ (gone)
//
// The phase is persisted before each step, so a scheduler that recovers a
// finished plan publishes its result (deduplicated by message ID) and a
// published one is only purged: a finished plan never runs again.
package planfsm
