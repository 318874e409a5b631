package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/narratoria/runtime/pkg/codec"
)

// Size limits of a plan (§3, §11). They are configurable; these are the defaults.
const (
	// MaxPlanToolsDefault is the most tools a plan may have.
	MaxPlanToolsDefault = 10_000
	// MaxPlanBytesDefault is the largest plan document, in bytes.
	MaxPlanBytesDefault = 8 << 20
	// MaxPlanProblems bounds how many problems one PlanError lists.
	MaxPlanProblems = 100
)

// PlanLimits bounds what DecodePlan accepts.
type PlanLimits struct {
	// MaxTools is the most tools per plan. Default MaxPlanToolsDefault.
	MaxTools int
	// MaxBytes is the largest plan document. Default MaxPlanBytesDefault.
	MaxBytes int
}

// WithDefaults fills zero fields with their defaults.
func (l PlanLimits) WithDefaults() PlanLimits {
	if l.MaxTools <= 0 {
		l.MaxTools = MaxPlanToolsDefault
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = MaxPlanBytesDefault
	}
	return l
}

// PlanError lists every problem DecodePlan found in a plan.
type PlanError struct {
	// PlanID is the plan's requestId if it could be read.
	PlanID string
	// Reason is the §4.10 failure reason: invalid_json, invalid_plan,
	// circular_dependency or unknown_skill.
	Reason string
	// Problems are the findings, each naming its field.
	Problems []Problem
}

// Error implements error: every problem, "; "-separated.
func (e *PlanError) Error() string {
	return "invalid plan: " + joinProblems(e.Problems)
}

// Unwrap returns ErrInvalidPlan.
func (e *PlanError) Unwrap() error { return ErrInvalidPlan }

// DecodePlan decodes a Plan JSON document, validates it with the Plan JSON
// Schema and the field rules of §3 that a schema cannot express (toolPath
// form, disabled skills, reference syntax, size limits), and applies the §3
// defaults. It returns a *PlanError listing every problem found, each naming
// its field, e.g. "tools[2].retryPolicy.maxRetries: maximum: got 11, want 10".
//
// Graph rules (duplicate IDs, unknown dependencies, cycles, references to
// non-ancestors) are checked by pkg/dag; registry rules (the script exists)
// by the scheduler.
func DecodePlan(b []byte, limits PlanLimits) (*Plan, error) {
	limits = limits.WithDefaults()
	if len(b) > limits.MaxBytes {
		return nil, &PlanError{Reason: ReasonInvalidPlan, Problems: []Problem{{
			Message: fmt.Sprintf("plan is %d bytes; the limit is %d (limits.maxPlanBytes)", len(b), limits.MaxBytes),
		}}}
	}
	if p, probs, exact, ok := scanPlan(b, true); ok && exact && len(probs) == 0 {
		if perr := keyProblem(b); perr != nil {
			return nil, perr
		}
		// The scan's Plan is the generic path's (see planscan.go); only the
		// checks after the schema remain.
		perr := &PlanError{PlanID: truncate(p.RequestID, 64), Reason: ReasonInvalidPlan}
		if len(p.Tools) > limits.MaxTools {
			perr.Problems = []Problem{toolLimitProblem(len(p.Tools), limits)}
			return nil, perr
		}
		if perr.Problems = capProblems(checkPlanFields(p)); len(perr.Problems) > 0 {
			return nil, perr
		}
		return p, nil
	}
	return decodePlanGeneric(b, limits)
}

// decodePlanGeneric is DecodePlan with the generic schema validator: it
// decodes b to `any` for the validator, then into a Plan. It is the
// reference the plan scan is tested against, and words every rejection.
func decodePlanGeneric(b []byte, limits PlanLimits) (*Plan, error) {
	generic, err := decodeForSchema(b)
	if err != nil {
		return nil, &PlanError{Reason: ReasonInvalidJSON, Problems: []Problem{{Message: "plan is not valid JSON: " + err.Error()}}}
	}
	if perr := keyProblem(b); perr != nil {
		return nil, perr
	}
	obj, ok := generic.(map[string]any)
	if !ok {
		return nil, &PlanError{Reason: ReasonInvalidPlan, Problems: []Problem{{Message: "plan must be a JSON object"}}}
	}
	planID, _ := obj["requestId"].(string)
	perr := &PlanError{PlanID: truncate(planID, 64), Reason: ReasonInvalidPlan}
	if tools, ok := obj["tools"].([]any); ok && len(tools) > limits.MaxTools {
		perr.Problems = append(perr.Problems, toolLimitProblem(len(tools), limits))
		return nil, perr
	}
	s, err := CompiledSchema(SchemaPlan)
	if err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	probs := ValidateSchema(s, generic)
	// On a schema failure the typed decode may stop at a mistyped field but
	// fills in the rest, so the field rules still run on what it read.
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil && len(probs) == 0 {
		probs = append(probs, Problem{Message: "decode plan: " + err.Error()})
	}
	probs = append(probs, checkPlanFields(&p)...)
	perr.Problems = capProblems(probs)
	if len(perr.Problems) > 0 {
		return nil, perr
	}
	return &p, nil
}

// keyProblem refuses a plan whose keys are not exact and unique, as the
// schema reads them: encoding/json would take "RequestId" for "requestId",
// and the last of two keys.
func keyProblem(b []byte) *PlanError {
	var ke *codec.KeyError
	if err := codec.CheckKeys(b, (*Plan)(nil)); errors.As(err, &ke) {
		return &PlanError{Reason: ReasonInvalidPlan, PlanID: planIDOf(b), Problems: []Problem{{Field: ke.Path, Message: ke.Error()}}}
	}
	return nil
}

// planIDOf reads a plan's requestId, if it has a usable one, for an error
// about the rest of the document.
func planIDOf(b []byte) string {
	var head struct {
		RequestID string `json:"requestId"`
	}
	_ = json.Unmarshal(b, &head)
	return truncate(head.RequestID, 64)
}

func toolLimitProblem(n int, limits PlanLimits) Problem {
	return Problem{Field: "tools", Message: fmt.Sprintf("plan has %d tools; the limit is %d (limits.maxPlanTools)", n, limits.MaxTools)}
}

func capProblems(ps []Problem) []Problem {
	if len(ps) <= MaxPlanProblems {
		return ps
	}
	n := len(ps) - MaxPlanProblems
	ps = ps[:MaxPlanProblems:MaxPlanProblems]
	return append(ps, Problem{Message: fmt.Sprintf("and %d more problems", n)})
}

// checkPlanFields checks the §3 rules a JSON Schema cannot express.
func checkPlanFields(p *Plan) []Problem {
	var probs []Problem
	disabled := make(map[string]bool, len(p.DisabledSkills))
	for _, s := range p.DisabledSkills {
		disabled[s] = true
	}
	// Plans repeat a few toolPaths many times: each tool's is parsed only
	// when it differs from the one before.
	var (
		lastPath string
		lastRef  ToolRef
		lastErr  error
	)
	for i := range p.Tools {
		t := &p.Tools[i]
		field := func() string { return "tools[" + strconv.Itoa(i) + "]" }
		if t.ToolPath == "" { // missing or mistyped: the schema reported it
			continue
		}
		if i == 0 || t.ToolPath != lastPath {
			lastPath = t.ToolPath
			lastRef, lastErr = ParseToolPath(t.ToolPath)
		}
		ref, err := lastRef, lastErr
		if err != nil {
			probs = append(probs, Problem{Field: field() + ".toolPath", Message: err.Error()})
		} else if disabled[ref.Skill] {
			probs = append(probs, Problem{Field: field() + ".toolPath",
				Message: fmt.Sprintf("tool %q uses skill %q, which the plan's disabledSkills lists", t.ToolID, ref.Skill)})
		}
		if !mayHaveRefs(t.Input) {
			continue
		}
		if _, err := FindRefs(t.Input, field()+".input"); err != nil {
			probs = append(probs, Problem{Field: field() + ".input", Message: err.Error()})
		}
		if len(probs) > MaxPlanProblems {
			break
		}
	}
	return probs
}

// Skill returns the skill a tool uses (the toolPath's skill segment), or ""
// when its toolPath does not parse.
func (t *Tool) Skill() string {
	ref, err := ParseToolPath(t.ToolPath)
	if err != nil {
		return ""
	}
	return ref.Skill
}
