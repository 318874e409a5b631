package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/pkg/messages"
)

// schedulerConfig is how every scheduler of a benchmark run is set up.
func schedulerConfig(id string) scheduler.Config {
	return scheduler.Config{ID: id, Concurrency: 256, MaxPlanTools: 20_000, MaxPlanBytes: 8 << 20}
}

// ServeScheduler runs a scheduler on url until stdin closes (a child
// process of a benchmark run, for the scale-out figure), then stops it
// gracefully (its partitions are handed over at once).
func ServeScheduler(url, id string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	sch, err := scheduler.New(nc, schedulerConfig(id), scheduler.Options{Logger: slog.New(slog.DiscardHandler), Bus: bus.Config{URL: url}})
	if err != nil {
		return err
	}
	if err := sch.Start(context.Background()); err != nil {
		return err
	}
	fmt.Println("started")
	_, _ = io.Copy(io.Discard, os.Stdin)
	sch.Stop()
	return nil
}

// child is a scheduler process of the scale-out figure.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (e *env) startSchedulers(n int) ([]*child, error) {
	var out []*child
	for i := range n {
		cmd := exec.Command(e.opts.Self, "serve-scheduler", e.url, fmt.Sprintf("bench-sched-%d-of-%d", i+1, n))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return out, err
		}
		c := &child{cmd: cmd, stdin: stdin}
		out = append(out, c)
		buf := make([]byte, 64)
		if _, err := stdout.Read(buf); err != nil {
			return out, fmt.Errorf("scheduler child: %w", err)
		}
	}
	return out, nil
}

func stopSchedulers(cs []*child) {
	for _, c := range cs {
		_ = c.stdin.Close()
	}
	for _, c := range cs {
		_ = c.cmd.Wait()
	}
}

// balanced waits until the schedulers named by prefix hold every
// partition in fair shares, and take its plans: a partition moved counts
// once its new owner recovered it and pulls from it (the status endpoint
// lists only those), so the figure measures running, not taking over.
func (e *env) balanced(ctx context.Context, n int) error {
	if err := e.leased(ctx, n); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pulling := 0
		for i := range n {
			var st scheduler.Status
			m, err := e.nc.Request(fmt.Sprintf("narratoria.scheduler.bench-sched-%d-of-%d.status", i+1, n), nil, time.Second)
			if err == nil && json.Unmarshal(m.Data, &st) == nil {
				pulling += len(st.Partitions)
			}
		}
		if pulling == e.bus.Partitions {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%d schedulers did not take the plans of every partition within 30 s", n)
}

// leased waits until the schedulers named by prefix hold the leases of
// every partition in fair shares.
func (e *env) leased(ctx context.Context, n int) error {
	kv, err := e.js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		return err
	}
	count := e.bus.Partitions
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m, err := partition.Owners(ctx, kv, "scheduler", count)
		if err == nil && len(m) == count {
			by := map[string]int{}
			for _, id := range m {
				by[id]++
			}
			ok := len(by) == n
			for id, k := range by {
				ok = ok && strings.HasSuffix(id, fmt.Sprintf("-of-%d", n)) && k >= count/n && k <= (count+n-1)/n
			}
			if ok {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%d schedulers did not share the partitions within 30 s", n)
}

// figure10 is orchestration throughput with 1, 2 and 4 scheduler
// processes against one nats-server: many wide plans of in-process tools
// over many sessions (so over every partition), all published at once.
// On a 2-core machine more processes cannot add CPU, so it also gives
// each scheduler process's CPU seconds per 1,000 tools — what predicts
// scaling on a machine with a core per process.
func (e *env) figure10(ctx context.Context) error {
	e.sch.Stop() // the in-process scheduler steps aside (its partitions are handed over)
	sessions, perPlan := e.iterations(16, 64), 50
	base := 0.0
	for _, n := range []int{1, 2, 4} {
		cs, err := e.startSchedulers(n)
		if err != nil {
			stopSchedulers(cs)
			return err
		}
		if err := e.balanced(ctx, n); err != nil {
			stopSchedulers(cs)
			return err
		}
		cpu0 := make([]time.Duration, n)
		for i, c := range cs {
			cpu0[i], _ = processCPU(c.cmd.Process.Pid)
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, sessions)
		for s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, err := e.runPlan(ctx, fmt.Sprintf("scale-%d-%d", n, s), plan("inproc", "wide", perPlan, "")); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		close(errs)
		var per []string
		for i, c := range cs {
			cpu, _ := processCPU(c.cmd.Process.Pid)
			per = append(per, fmt.Sprintf("%.2f", (cpu-cpu0[i]).Seconds()*1000/float64(sessions*perPlan)))
		}
		stopSchedulers(cs)
		if err := <-errs; err != nil {
			return err
		}
		rate := float64(sessions*perPlan) / d.Seconds()
		if n == 1 {
			base = rate
		}
		r := rate / base
		e.rows = append(e.rows, Row{Figure: fmt.Sprintf("10 orchestration throughput, %d scheduler process(es), %d plans of %d in-process tools over %d sessions", n, sessions, perPlan, sessions),
			Value:    fmt.Sprintf("%.0f tools/s; CPU s per 1,000 tools per process: %s", rate, strings.Join(per, ", ")),
			Baseline: fmt.Sprintf("1 process: %.0f tools/s", base), Ratio: fmt.Sprintf("%.2f×", r), Target: "reported (2 cores)", Met: true})
	}
	return nil
}
