package planner

import (
	"context"
	"testing"
)

// BenchmarkRulePlan measures one rule-based plan with the sample skills
// (the learned model fitted before the clock starts).
func BenchmarkRulePlan(b *testing.B) {
	cat, _ := CatalogueFromDir("../../skills")
	text := "I swing my axe at the troll and then look around"
	_, _ = RulePlanner{}.Plan(context.Background(), Request{Text: text, Catalogue: cat})
	b.ReportAllocs()
	for b.Loop() {
		_, _ = RulePlanner{}.Plan(context.Background(), Request{Text: text, Catalogue: cat})
	}
}

// BenchmarkRulePlanAsTyped measures one rule-based plan of a prompt typed
// as players type, which every reading rule works on: chat words, slips of
// the keyboard, a negated action, several clauses.
func BenchmarkRulePlanAsTyped(b *testing.B) {
	cat, _ := CatalogueFromDir("../../skills")
	text := "ok so i sneek past teh gaurds, im not gonna fight them lol, then wat can i do rn?"
	_, _ = RulePlanner{}.Plan(context.Background(), Request{Text: text, Catalogue: cat})
	b.ReportAllocs()
	for b.Loop() {
		_, _ = RulePlanner{}.Plan(context.Background(), Request{Text: text, Catalogue: cat})
	}
}
