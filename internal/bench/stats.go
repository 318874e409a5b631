// Package bench measures Narratoria against baselines measured in the same
// run (raw JetStream, raw os/exec) and writes docs/performance.md with an
// SVG chart of the scale curves. `make bench` and `make bench-quick` run it.
package bench

import (
	"fmt"
	"sort"
	"time"
)

// sample holds durations of one measurement.
type sample []time.Duration

func (s sample) sorted() sample {
	c := append(sample(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c
}

// p returns the q-quantile (0..1).
func (s sample) p(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := s.sorted()
	i := int(q * float64(len(c)-1))
	return c[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }

// Row is one line of the results table.
type Row struct {
	// Figure is the figure's number and name.
	Figure string
	// Value and Baseline are rendered figures.
	Value, Baseline string
	// Ratio is value/baseline (or baseline/value for throughput), rendered.
	Ratio string
	// Target is the goal, rendered.
	Target string
	// Met says whether the target held.
	Met bool
	// Note explains anything unusual.
	Note string
}
