package narrator

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/internal/testskills"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestOneTraceAcrossComponents: a prompt sent with a traceparent yields one
// connected trace across the narrator, two schedulers (the active one is
// stopped mid-plan and the standby finishes it) and the worker, with a
// span per tool attempt (a retry included) and per script run.
func TestOneTraceAcrossComponents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	srv := natstest.Start(t)
	log, _ := testlog.New(t)
	dir := t.TempDir()
	var flaky atomic.Int32
	slowStarted := make(chan struct{}, 1)
	var sawTraceParent atomic.Bool
	defs := map[string]runner.Func{
		"teller": func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"narration":"Told."}`)})
		},
		"flaky": func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			if flaky.Add(1) == 1 {
				return emit(&messages.DoneEvent{OK: false, Summary: "first try fails"})
			}
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{}`)})
		},
		"slow": func(ctx context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
			select {
			case slowStarted <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(1500 * time.Millisecond):
			}
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{}`)})
		},
	}
	ip := testskills.WriteMap(t, dir, "teller", defs)
	_ = sawTraceParent.Load()
	wk, err := skillworker.New(srv.Connect(t), skillworker.Config{SkillsDir: dir, Concurrency: 4, WatchInterval: -1},
		skillworker.Options{Logger: log, Runner: ip, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, wk.Start(context.Background()))
	t.Cleanup(wk.Stop)
	var schs []*scheduler.Scheduler
	for range 2 {
		sch, err := scheduler.New(srv.Connect(t), scheduler.Config{LeaseTTL: time.Second}, scheduler.Options{Logger: log, Bus: srv.Bus})
		require.NoError(t, err)
		require.NoError(t, sch.Start(context.Background()))
		t.Cleanup(sch.Stop)
		schs = append(schs, sch)
	}
	count := srv.Bus.WithDefaults().Partitions
	require.Eventually(t, func() bool { return len(schs[0].Owned())+len(schs[1].Owned()) == count }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	nar, err := New(srv.Connect(t), Config{PlanTimeoutMs: 20_000}, Options{Logger: log, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, nar.Start(context.Background()))
	t.Cleanup(nar.Stop)

	go func() {
		<-slowStarted
		for _, s := range schs {
			if s.Owns("tr") {
				s.Stop() // the other scheduler takes the plan over
			}
		}
	}()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	m := nats.NewMsg("narratoria.narrate")
	m.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	m.Data = []byte(`{"sessionId":"tr","text":"flaky and slow"}`)
	reply, err := srv.NC.RequestMsg(m, 30*time.Second)
	require.NoError(t, err)
	var n messages.Narration
	require.NoError(t, json.Unmarshal(reply.Data, &n), string(reply.Data))
	require.Contains(t, n.Text, "Told.")

	byName := map[string][]sdktrace.ReadOnlySpan{}
	require.Eventually(t, func() bool {
		byName = map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			byName[s.Name()] = append(byName[s.Name()], s)
		}
		return len(byName["scheduler.plan"]) >= 2 && len(byName["narrator.prompt"]) >= 1
	}, testlog.Budget(10*time.Second), 20*time.Millisecond, "both schedulers' plan spans ended")
	ids := map[string]bool{}
	for _, s := range rec.Ended() {
		ids[s.SpanContext().TraceID().String()] = true
		require.Equal(t, traceID, s.SpanContext().TraceID().String(), "span %s joined the caller's trace", s.Name())
	}
	require.Len(t, ids, 1, "one trace")
	for _, name := range []string{"narrator.prompt", "narrator.attempt", "scheduler.plan", "scheduler.tool", "skillworker.job", "script.run"} {
		require.NotEmpty(t, byName[name], "a %s span", name)
	}
	recovered := 0
	for _, s := range byName["scheduler.plan"] {
		for _, a := range s.Attributes() {
			if a.Key == "narratoria.recovered" && a.Value.AsBool() {
				recovered++
			}
		}
	}
	require.Equal(t, 1, recovered, "the standby's plan span is in the trace")
	flakyAttempts := 0
	for _, s := range byName["scheduler.tool"] {
		for _, a := range s.Attributes() {
			if a.Key == "narratoria.tool" && a.Value.AsString() == "t1-flaky" {
				flakyAttempts++
			}
		}
	}
	require.GreaterOrEqual(t, flakyAttempts, 2, "each attempt of the retried tool has its span")
	// Parents chain: a worker's job span is a child of a scheduler's tool span.
	spanIDs := map[string]string{}
	for _, s := range rec.Ended() {
		spanIDs[s.SpanContext().SpanID().String()] = s.Name()
	}
	for _, s := range byName["skillworker.job"] {
		require.Equal(t, "scheduler.tool", spanIDs[s.Parent().SpanID().String()], "job span parent")
	}
	for _, s := range byName["scheduler.plan"] {
		require.Equal(t, "narrator.attempt", spanIDs[s.Parent().SpanID().String()], "plan span parent")
	}
}
