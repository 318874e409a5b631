package testlog

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterSum is the sum of the counter series of metric family name in g
// whose labels match labels (a label not named matches any value): 0 when
// there is none yet. Tests read their components' metrics through it.
func CounterSum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("testlog: gather metrics: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
