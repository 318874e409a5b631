package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/pkg/messages"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(pausedHelperEnv); dir != "" {
		runPausedHelper(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

// A case of the conformance suite: the same behaviour as a sh script and as
// a Go function.
type conformanceCase struct {
	name    string
	sh      string
	fn      Func
	timeout time.Duration
	check   func(t *testing.T, res Result, seen []messages.Event)
}

func emitAll(emit func(messages.Event) error, evs ...messages.Event) error {
	for _, e := range evs {
		if err := emit(e); err != nil {
			return err
		}
	}
	return nil
}

var conformance = []conformanceCase{
	{
		name: "success with output",
		sh: `read -r _; echo '{"version":"0","type":"log","level":"info","message":"hi"}'
echo '{"version":"0","type":"done","ok":true,"output":{"n":1}}'`,
		fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emitAll(emit, &messages.LogEvent{Level: "info", Message: "hi"}, &messages.DoneEvent{OK: true, Output: json.RawMessage(`{"n":1}`)})
		},
		check: func(t *testing.T, res Result, seen []messages.Event) {
			require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
			require.Nil(t, res.Error)
			require.JSONEq(t, `{"n":1}`, string(res.Done.ToolOutput()))
			require.Len(t, res.Events, 2)
			require.Len(t, seen, 2)
			require.Equal(t, 0, res.ExitCode)
		},
	},
	{
		name: "summary is the output when there is none",
		sh:   `echo '{"version":"0","type":"done","ok":true,"summary":"fine"}'`,
		fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.DoneEvent{OK: true, Summary: "fine"})
		},
		check: func(t *testing.T, res Result, _ []messages.Event) {
			require.Equal(t, messages.ToolSuccess, res.State)
			require.JSONEq(t, `{"summary":"fine"}`, string(res.Done.ToolOutput()))
		},
	},
	{
		name: "done ok false",
		sh: `echo '{"version":"0","type":"error","errorCode":"nope","errorMessage":"bad formula"}'
echo '{"version":"0","type":"done","ok":false}'`,
		fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emitAll(emit, &messages.ErrorEvent{ErrorCode: "nope", ErrorMessage: "bad formula"}, &messages.DoneEvent{OK: false})
		},
		check: func(t *testing.T, res Result, _ []messages.Event) {
			require.Equal(t, messages.ToolFailed, res.State)
			require.Equal(t, "done_not_ok", res.Error.Code)
			require.Contains(t, res.Error.Message, "bad formula")
		},
	},
	{
		name: "no done",
		sh:   `echo '{"version":"0","type":"log","level":"info","message":"forgot"}'`,
		fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.LogEvent{Level: "info", Message: "forgot"})
		},
		check: func(t *testing.T, res Result, _ []messages.Event) {
			require.Equal(t, messages.ToolFailed, res.State)
			require.Equal(t, "no_done", res.Error.Code)
			require.Equal(t, messages.CategoryToolFailure, res.Error.Category)
		},
	},
	{
		name: "events after done are ignored",
		sh: `echo '{"version":"0","type":"done","ok":true}'
echo '{"version":"0","type":"log","level":"info","message":"late"}'
echo 'not even json'`,
		fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			_ = emit(&messages.DoneEvent{OK: true})
			return emit(&messages.LogEvent{Level: "info", Message: "late"})
		},
		check: func(t *testing.T, res Result, seen []messages.Event) {
			require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
			require.Len(t, res.Events, 1)
			require.Len(t, seen, 1)
		},
	},
	{
		name: "failure exit after done ok",
		sh: `echo '{"version":"0","type":"done","ok":true}'
exit 1`,
		fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			_ = emit(&messages.DoneEvent{OK: true})
			return errors.New("crashed after done")
		},
		check: func(t *testing.T, res Result, _ []messages.Event) {
			require.Equal(t, messages.ToolFailed, res.State)
			require.Equal(t, "exit_code", res.Error.Code)
			require.Equal(t, 1, res.ExitCode)
		},
	},
	{
		name:    "timeout",
		sh:      `sleep 30`,
		timeout: 300 * time.Millisecond,
		fn: func(ctx context.Context, _ messages.ScriptInput, _ func(messages.Event) error) error {
			<-ctx.Done()
			return ctx.Err()
		},
		check: func(t *testing.T, res Result, _ []messages.Event) {
			require.Equal(t, messages.ToolTimeout, res.State)
			require.Equal(t, messages.CategoryTimeout, res.Error.Category)
			require.Contains(t, res.Error.Message, "timeout")
			require.Less(t, res.Duration, 10*time.Second)
		},
	},
	{
		name: "too many events",
		sh: `i=0; while [ $i -lt 20 ]; do echo '{"version":"0","type":"log","level":"info","message":"x"}'; i=$((i+1)); done
echo '{"version":"0","type":"done","ok":true}'`,
		fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			for range 20 {
				if err := emit(&messages.LogEvent{Level: "info", Message: "x"}); err != nil {
					return err
				}
			}
			return emit(&messages.DoneEvent{OK: true})
		},
		check: func(t *testing.T, res Result, _ []messages.Event) {
			require.Equal(t, messages.ToolFailed, res.State)
			require.Equal(t, "event_limit", res.Error.Code)
		},
	},
	{
		name: "input reaches the script",
		sh:   `in=$(cat); case "$in" in *'"secret-word"'*) echo '{"version":"0","type":"done","ok":true}';; *) echo '{"version":"0","type":"done","ok":false,"summary":"input missing"}';; esac`,
		fn: func(_ context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.DoneEvent{OK: strings.Contains(string(in.Input), "secret-word"), Summary: "input missing"})
		},
		check: func(t *testing.T, res Result, _ []messages.Event) {
			require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
		},
	},
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return p
}

func invocation(dir, path string, timeout time.Duration) Invocation {
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	return Invocation{Skill: "s", Script: "x", Dir: dir, Path: path, Timeout: timeout,
		Input: messages.ScriptInput{RequestID: "r", SessionID: "sess", ToolID: "t", Tool: "s/x", Operation: "x", Attempt: 1,
			Input: json.RawMessage(`{"word":"secret-word"}`), State: json.RawMessage(`{}`), Config: json.RawMessage(`{}`)}}
}

func TestConformance(t *testing.T) {
	limits := Limits{MaxEvents: 10, KillGrace: 500 * time.Millisecond}
	runners := map[string]func(t *testing.T, c conformanceCase) (Runner, Invocation){
		"process": func(t *testing.T, c conformanceCase) (Runner, Invocation) {
			dir := t.TempDir()
			return &ProcessRunner{Limits: limits}, invocation(dir, writeScript(t, dir, "x", c.sh), c.timeout)
		},
		"inprocess": func(t *testing.T, c conformanceCase) (Runner, Invocation) {
			r := NewInProcess()
			r.Limits = limits
			r.Register("s", "x", c.fn)
			return r, invocation(t.TempDir(), "", c.timeout)
		},
	}
	for rname, mk := range runners {
		for _, c := range conformance {
			t.Run(rname+"/"+c.name, func(t *testing.T) {
				r, inv := mk(t, c)
				var mu sync.Mutex
				var seen []messages.Event
				res := r.Run(context.Background(), inv, func(ev messages.Event, _ json.RawMessage) {
					mu.Lock()
					seen = append(seen, ev)
					mu.Unlock()
				})
				mu.Lock()
				defer mu.Unlock()
				c.check(t, res, seen)
			})
		}
	}
}

func TestCancellation(t *testing.T) {
	dir := t.TempDir()
	for name, r := range map[string]Runner{"process": &ProcessRunner{Limits: Limits{KillGrace: 200 * time.Millisecond}}, "inprocess": func() Runner {
		ip := NewInProcess()
		ip.Register("s", "x", func(ctx context.Context, _ messages.ScriptInput, _ func(messages.Event) error) error {
			<-ctx.Done()
			return ctx.Err()
		})
		return ip
	}()} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			res := r.Run(ctx, invocation(dir, writeScript(t, dir, "x", "sleep 30"), 30*time.Second), nil)
			require.Equal(t, messages.ToolFailed, res.State)
			require.Equal(t, messages.CategoryCancelled, res.Error.Category)
		})
	}
}

func TestEventsAreLive(t *testing.T) {
	dir := t.TempDir()
	path := writeScript(t, dir, "x", `echo '{"version":"0","type":"log","level":"info","message":"first"}'
sleep 1
echo '{"version":"0","type":"done","ok":true}'`)
	start := time.Now()
	var firstAt time.Duration
	res := (&ProcessRunner{}).Run(context.Background(), invocation(dir, path, 0), func(ev messages.Event, _ json.RawMessage) {
		if firstAt == 0 {
			firstAt = time.Since(start)
		}
	})
	require.Equal(t, messages.ToolSuccess, res.State)
	require.Less(t, firstAt, res.Duration, "the first event arrived before the script ended")
	require.GreaterOrEqual(t, res.Duration-firstAt, 500*time.Millisecond)
}

func TestMinimalEnvironment(t *testing.T) {
	t.Setenv("NARRATORIA_TEST_SECRET", "hunter2")
	dir := t.TempDir()
	path := writeScript(t, dir, "x", `if [ -n "$NARRATORIA_TEST_SECRET" ]; then echo '{"version":"0","type":"done","ok":false,"summary":"secret leaked"}'; exit 0; fi
[ "$ALLOWED" = "yes" ] || { echo '{"version":"0","type":"done","ok":false,"summary":"allowed var missing"}'; exit 0; }
[ "$(pwd)" = "`+dir+`" ] || { echo '{"version":"0","type":"done","ok":false,"summary":"wrong dir"}'; exit 0; }
echo '{"version":"0","type":"done","ok":true}'`)
	inv := invocation(dir, path, 0)
	inv.Env = map[string]string{"ALLOWED": "yes"}
	res := (&ProcessRunner{}).Run(context.Background(), inv, nil)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
}

func TestInProcessPanicAndUnknown(t *testing.T) {
	r := NewInProcess()
	r.Register("s", "x", func(context.Context, messages.ScriptInput, func(messages.Event) error) error { panic("boom") })
	res := r.Run(context.Background(), invocation("", "", 0), nil)
	require.Equal(t, messages.ToolFailed, res.State)
	require.Equal(t, "panic", res.Error.Code)
	res = NewInProcess().Run(context.Background(), invocation("", "", 0), nil)
	require.Equal(t, messages.CategoryUnknownSkill, res.Error.Category)
}

// BenchmarkInProcessRun: one in-process attempt that emits its done
// event, as figure 9's tools do, called from a goroutine kept between
// attempts (as the worker's are).
func BenchmarkInProcessRun(b *testing.B) {
	r := NewInProcess()
	r.Register("s", "run", func(ctx context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
		return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"narration":"ok"}`)})
	})
	b.ReportAllocs()
	for b.Loop() {
		if res := r.Run(context.Background(), Invocation{Skill: "s", Script: "run"}, func(messages.Event, json.RawMessage) {}); res.State != messages.ToolSuccess {
			b.Fatal(res.State)
		}
	}
}

// TestScriptBusyForAMomentStillRuns: a script file still open for writing
// when its attempt starts (exec says "text file busy": a deploy replacing
// it, or a child forked meanwhile holding the writer's descriptor) runs
// once the writer lets go, moments later, instead of failing the attempt.
func TestScriptBusyForAMomentStillRuns(t *testing.T) {
	dir := t.TempDir()
	path := writeScript(t, dir, "x", `echo '{"version":"0","type":"done","ok":true}'`)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	go func() {
		time.Sleep(15 * time.Millisecond)
		_ = f.Close()
	}()
	res := (&ProcessRunner{}).Run(context.Background(), invocation(dir, path, 0), nil)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
}
