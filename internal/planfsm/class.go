package planfsm

import "github.com/narratoria/runtime/pkg/messages"

// Class says what a failed attempt means for retries and skill health.
type Class uint8

// The classes of a failure.
const (
	// Retryable: the skill failed (exit ≠ 0, done ok:false, a protocol
	// error, a timeout, a lost worker). Retried by the tool's policy
	// (§4.4) and fed to the skill's health (§7).
	Retryable Class = iota + 1
	// Terminal: retrying cannot help and the skill is not at fault (an
	// input that breaks the script's inputSchema, a reference the
	// scheduler cannot resolve, a skill or script nobody serves). The tool
	// fails at once (retryCount 0); health is unchanged.
	Terminal
	// Infrastructure: the system failed, not the skill (a job the
	// scheduler could not store). Retried by the tool's policy; health is
	// unchanged.
	Infrastructure
)

// Classify returns the class of an attempt's error, by its category.
func Classify(e *messages.ToolError) Class {
	if e == nil {
		return Retryable
	}
	switch e.Category {
	case messages.CategoryInvalidInput, messages.CategoryUnknownSkill:
		return Terminal
	case messages.CategoryInfrastructure:
		return Infrastructure
	}
	return Retryable
}
