package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/narratoria/runtime/internal/testlog"
)

// TestLoadAllWhilePlansFinish reads every plan record again and again
// (what a takeover does) while plans run, finish and are purged. A read
// through a bare KV watcher could wait for the end of the bucket's values
// forever: 4 of 100,000 reads stalled past 2 s before bus.ReadKV started
// a stalled read again. Every read now ends within 5 s. It takes a minute
// (make test-long).
func TestLoadAllWhilePlansFinish(t *testing.T) {
	t.Parallel()
	testlog.Long(t, "a soak or chaos test")
	e := newEnv(t, Config{})
	reads := 0
	for round := 0; round < 8; round++ {
		var done []<-chan bool
		for range 20 {
			ch := e.startPlan(t, "fin", plan(tool("a", nil, stepInput{}), tool("b", []string{"a"}, stepInput{})))
			d := make(chan bool, 1)
			go func() { <-ch; d <- true }()
			done = append(done, d)
		}
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _, _, err := e.sch.store.loadAll(ctx)
			cancel()
			reads++
			if err != nil {
				t.Fatalf("read %d of the plan records did not end: %v", reads, err)
			}
		}
		for _, d := range done {
			<-d
		}
	}
	t.Logf("%d reads, all ended", reads)
}
