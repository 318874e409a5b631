package plancheck

import (
	"fmt"
	"strings"
	"testing"

	"github.com/narratoria/runtime/pkg/messages"
)

// hugePlan is the plan of bench figure 8: n tools, each after the tool ten
// before it and one of the seven before it.
func hugePlan(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"requestId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","parallel":true,"tools":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		deps := "[]"
		if i >= 10 {
			deps = fmt.Sprintf(`["t%d","t%d"]`, i-10, i-1-(i%7))
		}
		fmt.Fprintf(&sb, `{"toolId":"t%d","toolPath":"dice/roll","dependencies":%s}`, i, deps)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// BenchmarkCheckHuge measures what bench figure 8 measures: Check and Order
// of a 100,000-tool plan.
func BenchmarkCheckHuge(b *testing.B) {
	doc := hugePlan(100_000)
	limits := messages.PlanLimits{MaxTools: 200_000, MaxBytes: 64 << 20}
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		c, err := Check(doc, limits, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.Graph.Order()
	}
}
