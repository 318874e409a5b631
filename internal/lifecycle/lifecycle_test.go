package lifecycle

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noStart(context.Context) error { return nil }

func TestStartThenStop(t *testing.T) {
	s := New("comp")
	assert.Equal(t, Idle, s.State())
	require.EqualError(t, s.Ready(), "not started")
	var got context.Context
	require.NoError(t, s.Start(func(ctx context.Context) error {
		got = ctx
		assert.Equal(t, Starting, s.State())
		return nil
	}))
	assert.Same(t, s.Context(), got)
	assert.Equal(t, Running, s.State())
	require.NoError(t, s.Ready())
	require.NoError(t, s.Context().Err())

	var order []string
	s.Stop(func() {
		order = append(order, "drain")
		assert.Equal(t, Stopping, s.State())
		assert.NoError(t, s.Context().Err(), "the work context is live while draining")
		select {
		case <-s.Stopping():
		default:
			t.Error("Stopping is not closed while draining")
		}
		assert.EqualError(t, s.Ready(), "stopping")
	}, func() {
		order = append(order, "finish")
		assert.Error(t, s.Context().Err(), "the work context is cancelled before finish")
	})
	assert.Equal(t, []string{"drain", "finish"}, order)
	assert.Equal(t, Stopped, s.State())
	require.EqualError(t, s.Ready(), "stopped")
	<-s.Done()
}

func TestStartTwice(t *testing.T) {
	s := New("comp")
	require.NoError(t, s.Start(noStart))
	ran := false
	err := s.Start(func(context.Context) error { ran = true; return nil })
	var se *StateError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, Running, se.State)
	require.EqualError(t, err, "comp: cannot start: running")
	assert.False(t, ran, "a second Start must not run its function")
	s.Stop(nil, nil)
	require.EqualError(t, s.Start(noStart), "comp: cannot start: stopped")
}

func TestStopBeforeStart(t *testing.T) {
	s := New("comp")
	s.Stop(func() { t.Error("drain ran for a service never started") }, func() { t.Error("finish ran for a service never started") })
	assert.Equal(t, Stopped, s.State())
	require.Error(t, s.Context().Err())
	<-s.Stopping()
	<-s.Done()
	ran := false
	require.EqualError(t, s.Start(func(context.Context) error { ran = true; return nil }), "comp: cannot start: stopped")
	assert.False(t, ran)
	assert.False(t, s.Go(func(context.Context) { t.Error("Go ran after Stop") }))
}

func TestStopIdempotent(t *testing.T) {
	s := New("comp")
	require.NoError(t, s.Start(noStart))
	var drains, finishes atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop(func() { drains.Add(1) }, func() { finishes.Add(1) })
			// Every caller returns once the stop is over.
			assert.Equal(t, Stopped, s.State())
		}()
	}
	wg.Wait()
	s.Stop(func() { drains.Add(1) }, func() { finishes.Add(1) })
	assert.Equal(t, int32(1), drains.Load())
	assert.Equal(t, int32(1), finishes.Load())
}

func TestGoroutinesWaitedFor(t *testing.T) {
	s := New("comp")
	assert.False(t, s.Go(func(context.Context) {}), "Go before Start must not run")
	var ended atomic.Int32
	release := make(chan struct{})
	require.NoError(t, s.Start(func(context.Context) error {
		// Goroutines started by the start function are tracked too.
		require.True(t, s.Go(func(ctx context.Context) { <-ctx.Done(); ended.Add(1) }))
		return nil
	}))
	for range 5 {
		require.True(t, s.Go(func(ctx context.Context) {
			<-ctx.Done()
			// A goroutine that is being waited for may start another,
			// which is waited for as well.
			s.Go(func(context.Context) { <-release; ended.Add(1) })
			ended.Add(1)
		}))
	}
	// One that ignores its context: Stop waits until it ends on its own.
	require.True(t, s.Go(func(context.Context) { <-release; ended.Add(1) }))
	go func() {
		<-s.Stopping()
		close(release)
	}()
	s.Stop(func() {
		assert.Equal(t, int32(0), ended.Load(), "goroutines end only once the context is cancelled")
	}, func() {
		assert.Equal(t, int32(12), ended.Load(), "finish runs after every goroutine ended")
	})
	assert.Equal(t, int32(12), ended.Load())
	assert.False(t, s.Go(func(context.Context) { t.Error("Go ran after Stop") }))
}

func TestFailedStart(t *testing.T) {
	s := New("comp")
	var ended atomic.Bool
	boom := errors.New("boom")
	err := s.Start(func(ctx context.Context) error {
		s.Go(func(ctx context.Context) { <-ctx.Done(); ended.Store(true) })
		return boom
	})
	require.ErrorIs(t, err, boom)
	assert.True(t, ended.Load(), "a failed Start waits for the goroutines it started")
	require.Error(t, s.Context().Err(), "a failed Start cancels the work context")
	assert.Equal(t, Failed, s.State())
	require.EqualError(t, s.Ready(), "failed to start")
	require.EqualError(t, s.Start(noStart), "comp: cannot start: failed to start")
	assert.False(t, s.Go(func(context.Context) { t.Error("Go ran after a failed start") }))
	var steps []string
	var drained atomic.Bool
	s.Stop(func() {
		steps = append(steps, "drain")
		assert.True(t, s.Go(func(context.Context) { drained.Store(true) }), "the drain step may start goroutines after a failed start")
	}, func() {
		steps = append(steps, "finish")
		assert.True(t, drained.Load(), "the drain step's goroutine was waited for")
	})
	assert.Equal(t, []string{"drain", "finish"}, steps, "Stop after a failed start still runs the component's steps")
	assert.Equal(t, Stopped, s.State())
}

// TestStopDuringStart: Stop waits for a Start in progress, then stops.
func TestStopDuringStart(t *testing.T) {
	s := New("comp")
	entered, proceed := make(chan struct{}), make(chan struct{})
	startErr := make(chan error, 1)
	go func() {
		startErr <- s.Start(func(ctx context.Context) error {
			close(entered)
			<-proceed
			s.Go(func(ctx context.Context) { <-ctx.Done() })
			return nil
		})
	}()
	<-entered
	stopped := make(chan struct{})
	go func() {
		s.Stop(func() { assert.Equal(t, Stopping, s.State()) }, nil)
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned while Start was running")
	default:
	}
	close(proceed)
	require.NoError(t, <-startErr)
	<-stopped
	assert.Equal(t, Stopped, s.State())
}

// TestConcurrentStartStop races Start, Stop and Go (run with -race): in
// every run exactly one outcome holds — Start ran and its goroutines were
// stopped, or Stop came first and Start refused.
func TestConcurrentStartStop(t *testing.T) {
	for range 200 {
		s := New("comp")
		var ran, leaked atomic.Bool
		var wg sync.WaitGroup
		var startErr error
		wg.Add(3)
		go func() {
			defer wg.Done()
			startErr = s.Start(func(ctx context.Context) error {
				ran.Store(true)
				s.Go(func(ctx context.Context) { <-ctx.Done() })
				return nil
			})
		}()
		go func() {
			defer wg.Done()
			s.Stop(nil, nil)
		}()
		go func() {
			defer wg.Done()
			s.Go(func(ctx context.Context) {
				if ctx.Err() == nil && s.State() == Stopped {
					leaked.Store(true)
				}
			})
		}()
		wg.Wait()
		if ran.Load() {
			require.NoError(t, startErr)
		} else {
			require.EqualError(t, startErr, "comp: cannot start: stopped")
		}
		assert.Equal(t, Stopped, s.State())
		assert.False(t, leaked.Load())
		require.Error(t, s.Context().Err())
	}
}

func TestStateStrings(t *testing.T) {
	for st, want := range map[State]string{Idle: "not started", Starting: "starting", Running: "running",
		Failed: "failed to start", Stopping: "stopping", Stopped: "stopped", State(42): "State(42)"} {
		assert.Equal(t, want, st.String())
	}
}

// TestGoKeptReusesGoroutines: a function of GoKept runs on the goroutine
// an earlier one ended on when that one waits idle; two at once run on
// two; the idle goroutines end with Stop (goleak checks), and GoKept after
// Stop runs nothing.
func TestGoKeptReusesGoroutines(t *testing.T) {
	s := New("comp")
	require.NoError(t, s.Start(noStart))
	id := func() string {
		b := make([]byte, 64)
		return strings.Fields(string(b[:runtime.Stack(b, false)]))[1] // "goroutine 42 [running]:"
	}
	on := func() string {
		got := make(chan string)
		require.True(t, s.GoKept(func(context.Context) { got <- id() }))
		return <-got
	}
	first := on()
	// The goroutine may not wait idle yet when the next comes.
	require.Eventually(t, func() bool { return on() == first }, 5*time.Second, time.Millisecond,
		"a later function runs on the goroutine the first ran on")
	hold := make(chan struct{})
	ids := make(chan string, 2)
	for range 2 {
		require.True(t, s.GoKept(func(context.Context) { ids <- id(); <-hold }))
	}
	a, b := <-ids, <-ids
	assert.NotEqual(t, a, b, "two at once run on two goroutines")
	close(hold)
	s.Stop(nil, nil)
	assert.False(t, s.GoKept(func(context.Context) { t.Error("GoKept ran after Stop") }))
}
