package scheduler

import (
	"strings"

	"slices"

	"github.com/nats-io/nats.go"

	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// run is one attempt the test skill saw.
type run struct {
	plan       string
	tool       string
	attempt    int
	start, end time.Time
	input      map[string]any
	state      map[string]any
}

// runLog records every attempt of the test skill.
type runLog struct {
	mu     sync.Mutex
	runs   []run
	starts []string // plan/tool of every script that started
}

func (l *runLog) start(plan, tool string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts = append(l.starts, plan+"/"+tool)
}

func (l *runLog) started(plan, tool string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.starts, plan+"/"+tool)
}

func (l *runLog) add(r run) {
	l.mu.Lock()
	l.runs = append(l.runs, r)
	l.mu.Unlock()
}

func (l *runLog) all() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]run(nil), l.runs...)
}

func (l *runLog) of(tool string) []run {
	var out []run
	for _, r := range l.all() {
		if r.tool == tool {
			out = append(out, r)
		}
	}
	return out
}

// stepInput drives the test skill's behaviour.
type stepInput struct {
	SleepMs   int            `json:"sleepMs"`
	FailTimes int            `json:"failTimes"` // fail attempts 1..FailTimes
	Patch     map[string]any `json:"patch"`
	Output    map[string]any `json:"output"`
	Hang      bool           `json:"hang"`
	// Noise emits this many 64 KiB log events before the done.
	Noise int `json:"noise"`
	// Fill patches the key "fill" with this many bytes (a large patch from
	// a small plan).
	Fill int `json:"fill"`
	// Big makes the output this many bytes (a large output from a small
	// plan: its tool log grows, its record does not).
	Big int `json:"big"`
	// Increment patches this key of the state to its value plus one.
	Increment string `json:"increment"`
	// NeedContext makes the done ask for more context with this suggestion (§9.1).
	NeedContext string `json:"needContext"`
}

// stepFunc is the body of test/step: sleeps, fails on demand, patches
// state, and records what it saw.
func stepFunc(log *runLog) runner.Func {
	return func(ctx context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
		log.start(in.RequestID, in.ToolID)
		r := run{plan: in.RequestID, tool: in.ToolID, attempt: in.Attempt, start: time.Now()}
		_ = json.Unmarshal(in.Input, &r.input)
		_ = json.Unmarshal(in.State, &r.state)
		var si stepInput
		_ = json.Unmarshal(in.Input, &si)
		defer func() { r.end = time.Now(); log.add(r) }()
		if si.Hang {
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-time.After(time.Duration(si.SleepMs) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		if in.Attempt <= si.FailTimes {
			return emit(&messages.DoneEvent{OK: false, Summary: fmt.Sprintf("planned failure of attempt %d", in.Attempt)})
		}
		if si.Increment != "" {
			n, _ := r.state[si.Increment].(float64)
			if err := emit(&messages.StatePatchEvent{Patch: map[string]any{si.Increment: n + 1}}); err != nil {
				return err
			}
		}
		for range si.Noise {
			if err := emit(&messages.LogEvent{Level: messages.LogDebug, Message: strings.Repeat(`"\\`, 64<<10/3)}); err != nil {
				return err
			}
		}
		if si.Fill > 0 {
			if err := emit(&messages.StatePatchEvent{Patch: map[string]any{"fill": strings.Repeat("x", si.Fill)}}); err != nil {
				return err
			}
		}
		if si.Patch != nil {
			if err := emit(&messages.StatePatchEvent{Patch: si.Patch}); err != nil {
				return err
			}
		}
		out := si.Output
		if si.Big > 0 {
			out = map[string]any{"big": strings.Repeat("o", si.Big)}
		}
		if out == nil {
			out = map[string]any{"tool": in.ToolID}
		}
		b, _ := json.Marshal(out)
		return emit(&messages.DoneEvent{OK: true, Output: b, NeedsMoreContext: si.NeedContext != "", ContextSuggestion: si.NeedContext})
	}
}

type env struct {
	srv  *natstest.Server
	log  *runLog
	sch  *Scheduler
	wk   *skillworker.Worker
	rec  *testlog.Recorder
	logs *slog.Logger
	dir  string
	bcfg Config
}

// writeTestSkills writes skills "test" and "other" with one script "step"
// each (the scripts are run by the in-process runner).
func writeTestSkills(t *testing.T, dir string) {
	for _, name := range []string{"test", "other"} {
		sd := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Join(sd, "scripts"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", "step"), []byte("#!/bin/sh\n"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(fmt.Sprintf(
			`{"name":%q,"version":"1.0.0","description":"test","scripts":[{"name":"step","path":"scripts/step","timeout":10000},`+
				`{"name":"typed","path":"scripts/step","timeout":10000,"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}}},`+
				`{"name":"long","path":"scripts/step","timeout":40000},{"name":"counter","path":"scripts/step"},`+
				`{"name":"counter-noreuse","path":"scripts/step","reuse":false}]}`, name)), 0o644))
	}
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	return newEnvOn(t, natstest.Start(t), cfg)
}

// newEnvOn builds the pipeline on a given server (e.g. a 3-node cluster).
func newEnvOn(t *testing.T, srv *natstest.Server, cfg Config) *env {
	t.Helper()
	e := &env{srv: srv, log: &runLog{}, dir: t.TempDir()}
	writeTestSkills(t, e.dir)
	log, rec := testlog.New(t)
	e.rec, e.logs = rec, log
	ip := runner.NewInProcess()
	ip.Register("test", "step", stepFunc(e.log))
	ip.Register("other", "step", stepFunc(e.log))
	ip.Register("test", "typed", stepFunc(e.log))
	ip.Register("test", "long", stepFunc(e.log))
	ip.Register("test", "counter", stepFunc(e.log))
	ip.Register("test", "counter-noreuse", stepFunc(e.log))
	wk, err := skillworker.New(e.srv.Connect(t), skillworker.Config{SkillsDir: e.dir, Concurrency: 16, WatchInterval: -1},
		skillworker.Options{Logger: log.With("component", "worker"), Runner: ip, Bus: e.srv.Bus})
	require.NoError(t, err)
	require.NoError(t, wk.Start(context.Background()))
	t.Cleanup(wk.Stop)
	e.wk = wk
	e.bcfg = cfg
	e.sch = e.scheduler(t, cfg)
	require.Eventually(t, e.sch.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	return e
}

func (e *env) scheduler(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	s, err := e.startScheduler(t, cfg)
	require.NoError(t, err)
	return s
}

// startScheduler starts a scheduler on its own connection, stopped at
// cleanup; safe to call from any goroutine (it does not fail the test).
func (e *env) startScheduler(t *testing.T, cfg Config) (*Scheduler, error) {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Second
	}
	nc, err := nats.Connect(e.srv.URL())
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	s, err := New(nc, cfg, Options{Logger: e.logs.With("component", "scheduler"), Bus: e.srv.Bus})
	if err != nil {
		return nil, err
	}
	if err := s.Start(context.Background()); err != nil {
		return nil, err
	}
	t.Cleanup(s.Stop)
	return s, nil
}

// tool builds a tool of the test skill.
func tool(id string, deps []string, in stepInput, mods ...func(*messages.Tool)) messages.Tool {
	b, _ := json.Marshal(in)
	tl := messages.Tool{ToolID: id, ToolPath: "test/step", Input: b, Dependencies: deps, Required: true,
		RetryPolicy: messages.RetryPolicy{MaxRetries: 0, BackoffMs: 100}}
	if deps == nil {
		tl.Dependencies = []string{}
	}
	for _, m := range mods {
		m(&tl)
	}
	return tl
}

func plan(tools ...messages.Tool) *messages.Plan {
	return &messages.Plan{RequestID: uuid.NewString(), Tools: tools, DisabledSkills: []string{},
		Metadata: messages.PlanMetadata{GenerationAttempt: 1}}
}

// startPlan publishes a plan; the channel gets its result (or nil when
// none came within a minute). Safe to wait on from any goroutine.
func (e *env) startPlan(t *testing.T, session string, p *messages.Plan) <-chan *messages.ExecutionResult {
	t.Helper()
	body, _ := json.Marshal(p)
	sub, err := e.srv.NC.SubscribeSync(fmt.Sprintf("narratoria.results.%s.%s", session, p.RequestID))
	require.NoError(t, err)
	_, err = e.srv.JS.Publish(context.Background(), "narratoria.plans."+session, body)
	require.NoError(t, err)
	out := make(chan *messages.ExecutionResult, 1)
	go func() {
		defer func() { _ = sub.Unsubscribe() }()
		msg, err := sub.NextMsg(60 * time.Second)
		if err != nil {
			out <- nil
			return
		}
		var res messages.ExecutionResult
		if json.Unmarshal(msg.Data, &res) != nil {
			out <- nil
			return
		}
		out <- &res
	}()
	return out
}

// runPlan publishes a plan and waits for its result.
func (e *env) runPlan(t *testing.T, session string, p any) *messages.ExecutionResult {
	t.Helper()
	var id string
	var body []byte
	switch v := p.(type) {
	case *messages.Plan:
		id = v.RequestID
		body, _ = json.Marshal(v)
	case string:
		body = []byte(v)
		var probe struct {
			RequestID string `json:"requestId"`
		}
		_ = json.Unmarshal(body, &probe)
		id = probe.RequestID
	}
	sub, err := e.srv.NC.SubscribeSync(fmt.Sprintf("narratoria.results.%s.%s", session, id))
	require.NoError(t, err)
	defer sub.Unsubscribe()
	_, err = e.srv.JS.Publish(context.Background(), "narratoria.plans."+session, body)
	require.NoError(t, err)
	msg, err := sub.NextMsg(60 * time.Second)
	require.NoError(t, err, "no result for plan %s", id)
	var res messages.ExecutionResult
	require.NoError(t, json.Unmarshal(msg.Data, &res))
	return &res
}

func toolResult(t *testing.T, res *messages.ExecutionResult, id string) messages.ToolResult {
	t.Helper()
	for _, tr := range res.ToolResults {
		if tr.ToolID == id {
			return tr
		}
	}
	t.Fatalf("no tool result for %s", id)
	return messages.ToolResult{}
}
