package messages

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ProseChunk is one piece of a narration's prose as the model writes it,
// published live (core NATS) on <prefix>.prose.<session> (Subjects.Prose)
// while the narrator streams it; the Narration that follows carries the
// whole text (schemas/prose-chunk.schema.json).
//
// Chunks of one prompt come in order, Seq 1, 2, 3…; the last has Done set
// (and no text, or the last piece). A Done chunk with Fallback set says
// the model failed part-way: what was shown is withdrawn and the
// narration carries the template prose instead. Seq 1 again for the same
// prompt means the prose started over (another narrator took the prompt
// over): drop what was shown.
type ProseChunk struct {
	// PromptID is the prompt the prose narrates.
	PromptID string `json:"promptId"`
	// PlanID is the plan whose result it narrates.
	PlanID string `json:"planId"`
	// Seq numbers the chunks of one prompt from 1.
	Seq int `json:"seq"`
	// Text is the piece of prose, to append to the pieces before it.
	Text string `json:"text"`
	// Done marks the last chunk.
	Done bool `json:"done,omitempty"`
	// Fallback, on the last chunk, says the model failed: the narration
	// carries the template prose, not what streamed.
	Fallback bool `json:"fallback,omitempty"`
}

// ProseByModel is Narration.Prose when a model wrote the narration's text.
const ProseByModel = "llm"

// PlanRequest asks the narrator for the plan it would make for a prompt,
// without running it (<prefix>.planner.plan, Subjects.PlannerPlan): how
// `narratoria eval` measures a live deployment's planner.
type PlanRequest struct {
	// Text is the player's words (1..4000 characters after trimming).
	Text string `json:"text"`
	// SessionID is the session whose skill health the catalogue follows;
	// default "eval".
	SessionID string `json:"sessionId,omitempty"`
}

// PlanReply is the narrator's answer to a PlanRequest.
type PlanReply struct {
	// Planner is the planner asked: "rules" or "llm". It is not replaced by
	// the rule planner when it fails: the failure is the answer.
	Planner string `json:"planner"`
	// Valid says the plan passed the narrator's checks (schema, graph,
	// known skills) as it would be published.
	Valid bool `json:"valid"`
	// Error says why there is no valid plan; ErrorKind classifies it
	// (http, rate_limited, server_error, timeout, cut, json, budget,
	// invalid_plan).
	Error     string `json:"error,omitempty"`
	ErrorKind string `json:"errorKind,omitempty"`
	// Plan is the plan made (absent when the planner made none).
	Plan *Plan `json:"plan,omitempty"`
	// Ms is the planning time in milliseconds, measured in the narrator.
	Ms float64 `json:"ms"`
	// NarrationSkills are the catalogue's skills with the narration
	// capability (the storyteller), which every plan ends with and which
	// no label names.
	NarrationSkills []string `json:"narrationSkills"`
}

// Prose is the live subject of a session's streamed prose,
// <prefix>.prose.<session>. No stream stores it.
func (s Subjects) Prose(session string) (string, error) {
	if err := s.CheckSession(session); err != nil {
		return "", err
	}
	return s.p() + ".prose." + session, nil
}

// PlannerPlan is the narrator's request/reply subject
// <prefix>.planner.plan: the plan it would make for a prompt (PlanRequest,
// PlanReply), not run. Not exported to tenants.
func (s Subjects) PlannerPlan() string { return s.p() + ".planner.plan" }

// DecodePlanRequest decodes a PlanRequest exactly: {"text": string,
// "sessionId"?: string}, the text 1..PromptTextMax characters after
// trimming (trimmed), the session a session of some deployment
// (ValidSession).
func DecodePlanRequest(b []byte) (*PlanRequest, error) {
	var r PlanRequest
	probs := decodeExact(b, &r, `plan request object {"text": string, "sessionId"?: string}`, []field{
		{name: "text", kind: kindString, required: true}, {name: "sessionId", kind: kindString}})
	if len(probs) == 0 {
		r.Text = strings.TrimSpace(r.Text)
		if n := utf8.RuneCountInString(r.Text); n == 0 || n > PromptTextMax {
			probs = append(probs, Problem{Field: "text", Message: fmt.Sprintf("must be 1..%d characters, got %d", PromptTextMax, n)})
		}
		if r.SessionID != "" && !ValidSession(r.SessionID) {
			probs = append(probs, Problem{Field: "sessionId", Message: (&TokenError{Kind: "sessionId", Value: truncate(r.SessionID, 80)}).Error()})
		}
	}
	if len(probs) > 0 {
		return nil, &RequestError{Kind: "plan request", Problems: probs}
	}
	return &r, nil
}
