package dag

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var benchSizes = []int{1_000, 10_000, 100_000}

// benchPlan returns a plan of the given shape: "chain" (each tool needs the
// previous one), "wide" (no dependencies), "random" (up to 3 dependencies
// on earlier tools, shuffled) or "refs" (random, and each tool references
// up to 2 random ancestors).
func benchPlan(shape string, size int) []Node {
	r := rand.New(rand.NewPCG(7, 9))
	switch shape {
	case "chain", "wide":
		nodes := make([]Node, size)
		for i := range nodes {
			nodes[i].ID = fmt.Sprintf("tool-%d", i)
			if shape == "chain" && i > 0 {
				nodes[i].Deps = []string{nodes[i-1].ID}
			}
		}
		return nodes
	case "random":
		return randomDAG(r, size, 3, 0)
	}
	nodes := randomDAG(r, size, 3, 0)
	g, err := Build(nodes)
	if err != nil {
		panic(err)
	}
	for i := range nodes {
		if len(nodes[i].Deps) == 0 {
			continue
		}
		// the first dependency's first dependency, else the dependency itself
		for range 2 {
			d := nodes[i].Deps[r.IntN(len(nodes[i].Deps))]
			if dd := g.Dependencies(d); len(dd) > 0 {
				d = dd[r.IntN(len(dd))]
			}
			nodes[i].Refs = append(nodes[i].Refs, d)
		}
	}
	return nodes
}

// resolve is the baseline: what any validator must do, index the IDs and
// look every dependency up.
func resolve(nodes []Node) int {
	index := make(map[string]int32, len(nodes))
	for i := range nodes {
		index[nodes[i].ID] = int32(i)
	}
	sum := 0
	for i := range nodes {
		for _, d := range nodes[i].Deps {
			sum += int(index[d])
		}
	}
	return sum
}

// reportBaseline adds the metric x-baseline: this benchmark's time per
// operation over the baseline's on the same plan, measured in the same run.
func reportBaseline(b *testing.B, nodes []Node, start time.Time, ops int) {
	perOp := time.Since(start).Seconds() / float64(ops)
	best := time.Duration(1 << 62)
	for range 5 {
		t := time.Now()
		resolve(nodes)
		best = min(best, time.Since(t))
	}
	b.ReportMetric(perOp/best.Seconds(), "x-baseline")
}

// BenchmarkBuildAndOrder validates and sorts plans of 1k, 10k and 100k
// tools; x-baseline compares with indexing the IDs and resolving the
// dependencies alone.
func BenchmarkBuildAndOrder(b *testing.B) {
	for _, shape := range []string{"chain", "wide", "random", "refs"} {
		for _, size := range benchSizes {
			nodes := benchPlan(shape, size)
			b.Run(fmt.Sprintf("%s/%d", shape, size), func(b *testing.B) {
				b.ReportAllocs()
				start, ops := time.Now(), 0
				for b.Loop() {
					g, err := Build(nodes)
					if err != nil {
						b.Fatal(err)
					}
					_ = g.Order()
					ops++
				}
				reportBaseline(b, nodes, start, ops)
			})
		}
	}
}

// BenchmarkTrackerRun runs whole executions: every round starts and
// succeeds every ready tool.
func BenchmarkTrackerRun(b *testing.B) {
	for _, shape := range []string{"chain", "wide", "random"} {
		for _, size := range benchSizes {
			g, err := Build(benchPlan(shape, size))
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%d", shape, size), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					tr := g.NewTracker()
					for !tr.Done() {
						for _, id := range tr.Ready() {
							if err := tr.Start(id); err != nil {
								b.Fatal(err)
							}
							if _, _, err := tr.Finish(id, Succeeded); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
			})
		}
	}
}

// BenchmarkTrackerSkip fails the root of a chain: one Finish skips every
// other tool.
func BenchmarkTrackerSkip(b *testing.B) {
	g, err := Build(benchPlan("chain", 100_000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		tr := g.NewTracker()
		if _, skipped, err := tr.Finish("tool-0", Failed); err != nil || len(skipped) != 99_999 {
			b.Fatal(err, len(skipped))
		}
	}
}
