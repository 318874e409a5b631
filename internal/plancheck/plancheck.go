// Package plancheck validates a Plan JSON document completely (docs/spec.md §3):
// the document and its fields (pkg/messages), the dependency graph and
// references (pkg/dag), and, given a registry, that every toolPath names a
// script some worker serves. The CLI's `plan validate` and the scheduler's
// intake share it, so both reject exactly the same plans.
package plancheck

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/narratoria/runtime/pkg/dag"
	"github.com/narratoria/runtime/pkg/messages"
)

// Script is what a registry knows of a resolved toolPath.
type Script struct {
	// Skill and Name identify the script ("<skill>/<name>").
	Skill, Name string
	// Timeout is the script's manifest timeout (0 if unknown).
	Timeout time.Duration
	// NoReuse says a replan must run the script again (manifest
	// "reuse": false).
	NoReuse bool
}

// Resolver resolves a parsed toolPath to a served script. It returns an
// error naming the problem (unknown skill, no live worker, unknown script).
type Resolver interface {
	Resolve(ref messages.ToolRef) (Script, error)
}

// ErrUnknownSkill is wrapped by Resolver errors for skills or scripts that
// nobody serves; the plan then fails with reason unknown_skill.
var ErrUnknownSkill = errors.New("unknown skill")

// Checked is a valid plan with its graph and resolved scripts.
type Checked struct {
	// Plan is the decoded plan with §3 defaults applied.
	Plan *messages.Plan
	// Graph is the plan's dependency graph.
	Graph *dag.Graph
	// Scripts holds each tool's script, by tool index (empty without a resolver).
	Scripts []Script
}

// Nodes converts a plan's tools into graph nodes, with the tool IDs its
// input references. A tool whose input does not parse gets no refs (the
// field check reports it).
func Nodes(p *messages.Plan) []dag.Node {
	nodes := make([]dag.Node, len(p.Tools))
	for i := range p.Tools {
		t := &p.Tools[i]
		nodes[i] = dag.Node{ID: t.ToolID, Deps: t.Dependencies}
		if !messages.MayHaveRefs(t.Input) {
			continue
		}
		refs, err := messages.FindRefs(t.Input, "tools["+strconv.Itoa(i)+"].input")
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		for _, r := range refs {
			if !seen[r.ToolID] {
				seen[r.ToolID] = true
				nodes[i].Refs = append(nodes[i].Refs, r.ToolID)
			}
		}
	}
	return nodes
}

// Check decodes and validates a plan. resolver may be nil (no registry
// check). The error is a *messages.PlanError whose Reason is the §4.10
// failure reason and whose Problems name every problem found.
func Check(b []byte, limits messages.PlanLimits, resolver Resolver) (*Checked, error) {
	p, err := messages.DecodePlan(b, limits)
	if err != nil {
		return nil, err
	}
	return CheckPlan(p, resolver)
}

// CheckPlan validates an already decoded plan's graph and toolPaths.
func CheckPlan(p *messages.Plan, resolver Resolver) (*Checked, error) {
	perr := &messages.PlanError{PlanID: p.RequestID, Reason: messages.ReasonInvalidPlan}
	g, gerr := dag.Build(Nodes(p))
	var index map[string]int // tool ID -> first index, to name the fields of graph problems
	if gerr != nil {
		index = make(map[string]int, len(p.Tools))
		for i := range p.Tools {
			if _, dup := index[p.Tools[i].ToolID]; !dup {
				index[p.Tools[i].ToolID] = i
			}
		}
	}
	cycle := false
	for _, e := range flatten(gerr) {
		perr.Problems = append(perr.Problems, graphProblem(e, index))
		var ce *dag.CycleError
		if errors.As(e, &ce) {
			cycle = true
		}
	}
	unknown := 0
	var scripts []Script
	if resolver != nil {
		scripts = make([]Script, len(p.Tools))
		for i := range p.Tools {
			field := "tools[" + strconv.Itoa(i) + "].toolPath"
			ref, err := messages.ParseToolPath(p.Tools[i].ToolPath)
			if err != nil {
				perr.Problems = append(perr.Problems, messages.Problem{Field: field, Message: err.Error()})
				continue
			}
			s, err := resolver.Resolve(ref)
			if err != nil {
				if errors.Is(err, ErrUnknownSkill) {
					unknown++
				}
				perr.Problems = append(perr.Problems, messages.Problem{Field: field, Message: err.Error()})
				continue
			}
			scripts[i] = s
		}
	}
	if len(perr.Problems) == 0 {
		return &Checked{Plan: p, Graph: g, Scripts: scripts}, nil
	}
	switch {
	case cycle:
		perr.Reason = messages.ReasonCircularDependency
	case unknown == len(perr.Problems):
		perr.Reason = messages.ReasonUnknownSkill
	}
	if len(perr.Problems) > messages.MaxPlanProblems {
		n := len(perr.Problems) - messages.MaxPlanProblems
		perr.Problems = append(perr.Problems[:messages.MaxPlanProblems], messages.Problem{Message: fmt.Sprintf("and %d more problems", n)})
	}
	return nil, perr
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// graphProblem names the field of a graph error: the tool's dependencies or
// input, or the tools list for a cycle.
func graphProblem(err error, index map[string]int) messages.Problem {
	field := func(id, sub string) string {
		if i, ok := index[id]; ok {
			return "tools[" + strconv.Itoa(i) + "]" + sub
		}
		return "tools"
	}
	var (
		dup  *dag.DuplicateIDError
		unk  *dag.UnknownDependencyError
		self *dag.SelfDependencyError
		ref  *dag.RefError
	)
	switch {
	case errors.As(err, &dup):
		return messages.Problem{Field: "tools[" + strconv.Itoa(dup.Index) + "].toolId", Message: err.Error()}
	case errors.As(err, &unk):
		return messages.Problem{Field: field(unk.ID, ".dependencies"), Message: err.Error()}
	case errors.As(err, &self):
		return messages.Problem{Field: field(self.ID, ".dependencies"), Message: err.Error()}
	case errors.As(err, &ref):
		return messages.Problem{Field: field(ref.ID, ".input"), Message: err.Error()}
	}
	return messages.Problem{Field: "tools", Message: err.Error()}
}
