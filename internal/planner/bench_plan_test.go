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
