package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestChaosLeaderChurn (make test-long) runs hundreds of plans while the
// active scheduler is stopped and replaced over and over: every plan must
// end with a successful result and no tool may be lost.
func TestChaosLeaderChurn(t *testing.T) {
	testlog.Long(t, "a soak or chaos test")
	e := newEnv(t, Config{Concurrency: 4})
	const plans = 300
	results := make(chan messages.ExecutionResult, plans)
	sub, err := e.srv.NC.Subscribe("narratoria.results.chaos.*", func(m *nats.Msg) {
		var r messages.ExecutionResult
		if json.Unmarshal(m.Data, &r) == nil {
			results <- r
		}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	churnErr := make(chan error, 1)
	wg.Add(1)
	go func() { // churn: stop the active scheduler, start a fresh one
		defer wg.Done()
		current := e.sch
		standby, err := e.startScheduler(t, Config{Concurrency: 4, LeaseTTL: time.Second})
		if err != nil {
			churnErr <- err
			return
		}
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(700 * time.Millisecond):
			}
			current.Stop()
			next, err := e.startScheduler(t, Config{Concurrency: 4, LeaseTTL: time.Second})
			if err != nil {
				churnErr <- err
				return
			}
			current, standby = standby, next
		}
	}()
	for i := range plans {
		async := func(tl *messages.Tool) { tl.Async = true }
		p := plan(tool("a", nil, stepInput{SleepMs: 5}, async), tool("b", []string{"a"}, stepInput{SleepMs: 5}, async),
			tool("c", []string{"a"}, stepInput{SleepMs: 5}, async), tool("d", []string{"b", "c"}, stepInput{}, async))
		p.Parallel = true
		p.Narrative = fmt.Sprint(i)
		b, _ := json.Marshal(p)
		_, err := e.srv.JS.Publish(context.Background(), "narratoria.plans.chaos", b)
		require.NoError(t, err)
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]bool{}
	deadline := time.After(5 * time.Minute)
	for len(got) < plans {
		select {
		case r := <-results:
			require.True(t, r.Success, "plan %s: %s %s", r.PlanID, r.FailureReason, r.Message)
			got[r.PlanID] = true
		case err := <-churnErr:
			t.Fatalf("churn: %v", err)
		case <-deadline:
			t.Fatalf("only %d of %d plans finished", len(got), plans)
		}
	}
	cancel()
	wg.Wait()
	runs := map[string]int{}
	for _, r := range e.log.all() {
		runs[r.plan+"/"+r.tool]++
	}
	twice := 0
	for k, n := range runs {
		if n > 1 {
			twice++
			t.Errorf("%s ran %d times", k, n)
		}
	}
	t.Logf("%d plans through leader churn: %d tool runs, %d run more than once", plans, len(runs), twice)
	require.Len(t, runs, 4*plans, "every tool of every plan ran")
}
