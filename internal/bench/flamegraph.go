package bench

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"

	"github.com/google/pprof/profile"

	"github.com/narratoria/runtime/internal/bench/flame"
)

// flameGraphFile is the flame graph of figure 5 in the docs folder.
const flameGraphFile = "flamegraph-throughput.svg"

// withFlameGraph runs a figure under the CPU profiler and keeps the flame
// graph of its profile in e.flame. When the profiler is already running
// (narratoria-bench --cpuprofile) the figure runs without it.
func (e *env) withFlameGraph(fig func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var buf bytes.Buffer
		if err := pprof.StartCPUProfile(&buf); err != nil {
			fmt.Fprintf(e.opts.Out, "no flame graph of figure 5: %v\n", err)
			return fig(ctx)
		}
		err := fig(ctx)
		pprof.StopCPUProfile()
		if err != nil {
			return err
		}
		p, err := profile.Parse(&buf)
		if err != nil {
			return fmt.Errorf("flame graph of figure 5: parse profile: %w", err)
		}
		var svg bytes.Buffer
		err = flame.Render(&svg, p, flame.Options{
			Title: "Figure 5, orchestration throughput: CPU of the bench process (scheduler, worker, in-process runner)",
			Subtitle: fmt.Sprintf("%d samples over %.1f s; nats-server runs in a child process and is not in this profile",
				len(p.Sample), float64(p.DurationNanos)/1e9),
		})
		if err != nil {
			return fmt.Errorf("flame graph of figure 5: %w", err)
		}
		e.flame = svg.Bytes()
		return nil
	}
}
