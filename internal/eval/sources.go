package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/pkg/messages"
)

// planDeadline bounds one plan, as the narrator bounds plan generation.
const planDeadline = 5 * time.Second

// InProcess plans in this process with a planner on a catalogue (a skills
// folder: planner.CatalogueFromDir), checking each plan as the narrator
// does.
type InProcess struct {
	// Planner plans; Label names it in the report (default its Name).
	Planner planner.Planner
	Label   string
	// Catalogue is what it may choose from.
	Catalogue *planner.Catalogue
}

// Name implements Source.
func (s *InProcess) Name() string {
	if s.Label != "" {
		return s.Label
	}
	return s.Planner.Name()
}

// Plan implements Source. A planner's failure is the prompt's answer, not
// an error of the source.
func (s *InProcess) Plan(ctx context.Context, text string) (Planned, error) {
	ctx, cancel := context.WithTimeout(ctx, planDeadline)
	defer cancel()
	req := planner.Request{SessionID: "eval", Text: text, Attempt: 1, Catalogue: s.Catalogue}
	t0 := time.Now()
	p, err := s.Planner.Plan(ctx, req)
	out := Planned{Plan: p, Took: time.Since(t0), NarrationSkills: s.Catalogue.NarrationSkills()}
	if err == nil {
		p.SessionID, p.Metadata.GenerationAttempt = req.SessionID, 1
		err = planner.CheckPlan(p, s.Catalogue)
	}
	if err != nil {
		out.Error, out.ErrorKind = err.Error(), errorKind(err)
		return out, nil
	}
	out.Valid = true
	return out, nil
}

// errorKind classifies a planner's failure as the narrator's metrics do.
func errorKind(err error) string {
	switch {
	case llm.KindOf(err) != "":
		return llm.KindOf(err)
	case errors.Is(err, context.DeadlineExceeded):
		return llm.KindTimeout
	default:
		return "invalid_plan"
	}
}

// Remote asks a live deployment's narrators for the plan they would make
// (<prefix>.planner.plan), with their skills, health and planner; nothing
// runs.
type Remote struct {
	// NC is the connection; Subjects names the deployment's subjects.
	NC       *nats.Conn
	Subjects messages.Subjects
	// Session is the session whose skill health applies. Default "eval".
	Session string
}

// Name implements Source.
func (*Remote) Name() string { return "live" }

// Plan implements Source.
func (s *Remote) Plan(ctx context.Context, text string) (Planned, error) {
	body, _ := json.Marshal(messages.PlanRequest{Text: text, SessionID: s.Session})
	ctx, cancel := context.WithTimeout(ctx, planDeadline+5*time.Second)
	defer cancel()
	subj := s.Subjects.PlannerPlan()
	m, err := s.NC.RequestWithContext(ctx, subj, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return Planned{}, fmt.Errorf("no narrator answers on %s (is the deployment up, and this version or later?)", subj)
	}
	if err != nil {
		return Planned{}, fmt.Errorf("request %s: %w", subj, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return Planned{}, fmt.Errorf("%s: %s %s", subj, code, m.Header.Get("Nats-Service-Error"))
	}
	var r messages.PlanReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return Planned{}, fmt.Errorf("unreadable plan reply: %w", err)
	}
	return Planned{Plan: r.Plan, Valid: r.Valid, Error: r.Error, ErrorKind: r.ErrorKind, Took: time.Duration(r.Ms * float64(time.Millisecond)),
		NarrationSkills: r.NarrationSkills}, nil
}
