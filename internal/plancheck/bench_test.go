package plancheck_test

import (
	"testing"

	"github.com/narratoria/runtime/internal/bench"
	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/messages"
)

// BenchmarkCheckHuge measures what bench figure 8 measures: Check and Order
// of a 100,000-tool plan.
func BenchmarkCheckHuge(b *testing.B) {
	doc := bench.HugePlan(100_000)
	limits := messages.PlanLimits{MaxTools: 200_000, MaxBytes: 64 << 20}
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		c, err := plancheck.Check(doc, limits, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.Graph.Order()
	}
}
