package dag

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func shapeNodes(shape string, size int) []Node {
	switch shape {
	case "chain":
		nodes := make([]Node, size)
		for i := range nodes {
			nodes[i].ID = fmt.Sprintf("t%d", i)
			if i > 0 {
				nodes[i].Deps = []string{nodes[i-1].ID}
			}
		}
		return nodes
	case "wide":
		nodes := make([]Node, size)
		for i := range nodes {
			nodes[i].ID = fmt.Sprintf("t%d", i)
		}
		return nodes
	}
	return randomDAG(rand.New(rand.NewPCG(7, 9)), size, 3)
}

// BenchmarkBuildAndOrder is validate + sort of plans of 1k, 10k and 100k tools.
func BenchmarkBuildAndOrder(b *testing.B) {
	for _, shape := range []string{"chain", "wide", "random"} {
		for _, size := range []int{1_000, 10_000, 100_000} {
			nodes := shapeNodes(shape, size)
			b.Run(fmt.Sprintf("%s/%d", shape, size), func(b *testing.B) {
				for b.Loop() {
					g, err := Build(nodes)
					if err != nil {
						b.Fatal(err)
					}
					_ = g.Order()
				}
			})
		}
	}
}

// BenchmarkTrackerRun runs a whole wide and chain execution through the tracker.
func BenchmarkTrackerRun(b *testing.B) {
	for _, shape := range []string{"chain", "wide"} {
		g, err := Build(shapeNodes(shape, 10_000))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(shape+"/10000", func(b *testing.B) {
			for b.Loop() {
				tr := g.NewTracker()
				for !tr.Done() {
					var id string
					tr.EachReady(func(x string) bool { id = x; return false })
					_ = tr.Start(id)
					_, _, _ = tr.Finish(id, Succeeded)
				}
			}
		})
	}
}
