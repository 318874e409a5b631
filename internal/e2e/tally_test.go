package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// tally is a skill worker serving the skill "tally" (keyword "count") with
// an in-process script that counts its runs by plan and tool, so a test
// can check that no tool ran twice.
type tally struct {
	mu   sync.Mutex
	runs map[string]int
}

// startTally writes the tally skill under dir and starts its worker on nc;
// each run takes delay.
func startTally(t *testing.T, dir string, nc *nats.Conn, cfg bus.Config, concurrency int, delay time.Duration) *tally {
	t.Helper()
	log, _ := testlog.New(t)
	skills := filepath.Join(dir, "skills")
	require.NoError(t, os.MkdirAll(filepath.Join(skills, "tally", "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(skills, "tally", "scripts", "count"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(skills, "tally", "skill.json"),
		[]byte(`{"name":"tally","version":"1.0.0","description":"counts","keywords":["count"],"scripts":[{"name":"count","path":"scripts/count"}]}`), 0o644))
	tl := &tally{runs: map[string]int{}}
	ip := runner.NewInProcess()
	ip.Register("tally", "count", func(ctx context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
		tl.mu.Lock()
		tl.runs[in.RequestID+"/"+in.ToolID]++
		tl.mu.Unlock()
		time.Sleep(delay)
		return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"narration":"counted"}`)})
	})
	wk, err := skillworker.New(nc, skillworker.Config{SkillsDir: skills, Concurrency: concurrency, WatchInterval: -1},
		skillworker.Options{Logger: log.With("component", "worker"), Runner: ip, Bus: cfg})
	require.NoError(t, err)
	require.NoError(t, wk.Start(context.Background()))
	t.Cleanup(wk.Stop)
	return tl
}

// twice reports the tools that ran more than once, and how many tools ran.
func (tl *tally) twice(t *testing.T) (twice, ran int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for k, n := range tl.runs {
		if n > 1 {
			twice++
			t.Errorf("%s ran %d times", k, n)
		}
	}
	return twice, len(tl.runs)
}

// ranFor reports whether a tool of plan ran.
func (tl *tally) ranFor(plan string) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for k := range tl.runs {
		if strings.HasPrefix(k, plan+"/") {
			return true
		}
	}
	return false
}
