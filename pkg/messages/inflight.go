package messages

import (
	"encoding/json"
	"time"
)

// BucketInflight is the internal bucket of prompts being narrated: key
// <session>.<promptId> (or <session>.seq-<n> for a stream prompt without a
// promptId), value a PromptAttempt. The key is deleted once the prompt's
// narration is stored in BucketPrompts.
const BucketInflight = "narratoria_inflight"

// PromptAttempt is the narrator's durable record of a prompt's running
// attempt. It is written before the attempt's plan is published, so a
// narrator that takes the prompt over (after a restart, or for a request
// retried with the same promptId) waits for that plan's result and carries
// the replan loop on from this attempt instead of planning it again.
type PromptAttempt struct {
	// Attempt is the replan loop's attempt (1..maxAttempts) whose plan runs.
	Attempt int `json:"attempt"`
	// PlanID is the running plan's requestId.
	PlanID string `json:"planId"`
	// Plan is the plan exactly as published (republished, under the same
	// message ID, when the narrator died before publishing it).
	Plan json.RawMessage `json:"plan"`
	// DisabledSkills are the skills this attempt was planned without.
	DisabledSkills []string `json:"disabledSkills"`
	// Trace holds the earlier attempts, oldest first.
	Trace []AttemptTrace `json:"trace"`
	// State is the session state after the last attempt that had a result,
	// for a fallback narration.
	State json.RawMessage `json:"state,omitempty"`
	// ReceivedAt is when the first narrator took the prompt.
	ReceivedAt time.Time `json:"receivedAt"`
	// StartedAt is when this attempt's plan was recorded, just before it
	// was published.
	StartedAt time.Time `json:"startedAt"`
}
