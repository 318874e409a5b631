package dag_test

import (
	"errors"
	"fmt"

	"github.com/narratoria/runtime/pkg/dag"
)

// A diamond: roll and recall both need the scene, and narrate needs both.
// Ties go to the lowest plan index, so roll runs before recall.
func ExampleBuild() {
	g, err := dag.Build([]dag.Node{
		{ID: "narrate", Deps: []string{"roll", "recall"}, Refs: []string{"roll", "scene"}},
		{ID: "scene"},
		{ID: "roll", Deps: []string{"scene"}},
		{ID: "recall", Deps: []string{"scene"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g.Order())
	fmt.Println(g.Levels(), g.CriticalPathLen())
	// Output:
	// [scene roll recall narrate]
	// [[scene] [roll recall] [narrate]] 3
}

// Build reports every problem; each is a typed error. In a cycle, a -> b
// means b depends on a.
func ExampleBuild_problems() {
	_, err := dag.Build([]dag.Node{
		{ID: "a", Deps: []string{"c"}},
		{ID: "b", Deps: []string{"a"}},
		{ID: "c", Deps: []string{"b"}},
		{ID: "d", Deps: []string{"ghost"}},
	})
	fmt.Println(err)
	var ce *dag.CycleError
	if errors.As(err, &ce) {
		fmt.Println(ce.Path, errors.Is(err, dag.ErrCycle))
	}
	// Output:
	// tool "d" depends on "ghost", which is not a tool of the plan
	// cycle: a -> b -> c -> a
	// [a b c a] true
}

// A scheduler's loop: start what is ready, finish it, repeat. A required
// failure skips the tools that depend on it, and nothing else.
func ExampleTracker() {
	g, _ := dag.Build([]dag.Node{
		{ID: "fetch"},
		{ID: "parse", Deps: []string{"fetch"}},
		{ID: "summarise", Deps: []string{"parse"}},
		{ID: "dice"},
	})
	tr := g.NewTracker()
	outcomes := map[string]dag.Outcome{"parse": dag.Failed}
	for !tr.Done() {
		for _, id := range tr.Ready() {
			_ = tr.Start(id)
			o, ok := outcomes[id]
			if !ok {
				o = dag.Succeeded
			}
			ready, skipped, _ := tr.Finish(id, o)
			fmt.Printf("%s %s: ready %v, skipped %v\n", id, o, ready, skipped)
		}
	}
	fmt.Printf("%+v\n", tr.Counts())
	// Output:
	// fetch succeeded: ready [parse], skipped []
	// dice succeeded: ready [], skipped []
	// parse failed: ready [], skipped [summarise]
	// {Pending:0 Ready:0 Running:0 Succeeded:2 Failed:1 FailedOptional:0 Skipped:1}
}
