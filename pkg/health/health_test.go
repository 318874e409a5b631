package health

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestTable drives every state × input pair of docs/spec.md §7 from a count of 0
// and, for the counted cells, from a count of 2 (the third failure).
func TestTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from         State
		count        int
		in           Input
		to           State
		wantFailures int
	}{
		{Healthy, 0, Success, Healthy, 0},
		{Healthy, 2, Success, Healthy, 0},
		{Healthy, 0, Transient, TemporaryFailure, 0},
		{Healthy, 0, Failure, Healthy, 1},
		{Healthy, 2, Failure, Degraded, 0},
		{Healthy, 1, Exhausted, Healthy, 1},
		{Healthy, 1, Reset, Healthy, 0},

		{Degraded, 2, Success, Healthy, 0},
		{Degraded, 0, Transient, Degraded, 1},
		{Degraded, 2, Transient, PermanentFailure, 0},
		{Degraded, 0, Failure, Degraded, 1},
		{Degraded, 2, Failure, PermanentFailure, 0},
		{Degraded, 1, Exhausted, Degraded, 1},
		{Degraded, 1, Reset, Healthy, 0},

		{TemporaryFailure, 0, Success, Healthy, 0},
		{TemporaryFailure, 0, Transient, TemporaryFailure, 0},
		{TemporaryFailure, 0, Failure, TemporaryFailure, 0},
		{TemporaryFailure, 0, Exhausted, PermanentFailure, 0},
		{TemporaryFailure, 0, Reset, Healthy, 0},

		{PermanentFailure, 0, Success, PermanentFailure, 0},
		{PermanentFailure, 0, Transient, PermanentFailure, 0},
		{PermanentFailure, 0, Failure, PermanentFailure, 0},
		{PermanentFailure, 0, Exhausted, PermanentFailure, 0},
		{PermanentFailure, 0, Reset, Healthy, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d/%s", tt.from, tt.count, tt.in), func(t *testing.T) {
			next, tr := Next(Status{State: tt.from, Failures: tt.count}, tt.in, "why", t0)
			require.Equal(t, tt.to, next.State)
			require.Equal(t, tt.wantFailures, next.Failures)
			require.Equal(t, tt.from, tr.From)
			require.Equal(t, tt.to, tr.To)
			require.Equal(t, tt.from != tt.to, tr.Changed)
			if tr.Changed {
				require.Equal(t, t0, next.Since)
				require.NotEmpty(t, next.Reason)
			}
		})
	}
}

func TestCountedPaths(t *testing.T) {
	t.Parallel()
	run := func(start State, ins ...Input) Status {
		s := Status{State: start}
		for _, in := range ins {
			s, _ = Next(s, in, "exit code 1", t0)
		}
		return s
	}
	require.Equal(t, Degraded, run(Healthy, Failure, Failure, Failure).State)
	require.Equal(t, Healthy, run(Healthy, Failure, Failure, Success, Failure, Failure).State, "a success resets the count")
	require.Equal(t, PermanentFailure, run(Healthy, Failure, Failure, Failure, Failure, Failure, Failure).State)
	require.Equal(t, PermanentFailure, run(Degraded, Transient, Failure, Transient).State)
	require.Equal(t, Healthy, run(Degraded, Transient, Failure, Success).State)
	require.Equal(t, PermanentFailure, run(Healthy, Transient, Exhausted).State)
	_, tr := Next(Status{State: Healthy, Failures: 2}, Failure, "exit code 1", t0)
	require.Equal(t, "3 consecutive failures (last: exit code 1)", tr.Reason)
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"healthy", "degraded", "temporaryFailure", "permanentFailure"} {
		st, err := ParseState(s)
		require.NoError(t, err)
		require.Equal(t, State(s), st)
	}
	_, err := ParseState("sick")
	require.True(t, errors.Is(err, ErrUnknownState))
	for _, s := range []string{"success", "transient", "failure", "exhausted", "reset"} {
		_, err := ParseInput(s)
		require.NoError(t, err)
	}
	_, err = ParseInput("boom")
	require.True(t, errors.Is(err, ErrUnknownInput))
}

func TestPlannerRules(t *testing.T) {
	t.Parallel()
	require.False(t, PermanentFailure.Selectable())
	require.True(t, Degraded.Selectable())
	require.Equal(t, 2, Degraded.TimeoutFactor())
	require.Equal(t, 1, Healthy.TimeoutFactor())
	require.True(t, Degraded.Deprioritized())
	require.False(t, TemporaryFailure.Deprioritized())
}

func TestTracker(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	for range 3 {
		tr.Apply("s1", "dice", Failure, "boom", t0)
	}
	tr.Apply("s1", "memory", Transient, "timeout", t0)
	tr.Apply("s1", "memory", Exhausted, "3 attempts", t0)
	require.Equal(t, Degraded, tr.Status("s1", "dice").State)
	require.Equal(t, Healthy, tr.Status("s2", "dice").State, "sessions are independent")
	require.Equal(t, []string{"memory"}, tr.Disabled("s1"))
	changed := tr.Reset("s1", t0)
	require.Len(t, changed, 2)
	require.Empty(t, tr.Disabled("s1"))
	tr.Set("s3", "x", Status{State: PermanentFailure})
	require.Equal(t, []string{"x"}, tr.Disabled("s3"))
	tr.Forget("s3")
	require.Empty(t, tr.Skills("s3"))
}

func TestTrackerConcurrent(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tr.Apply(fmt.Sprintf("s%d", g%2), fmt.Sprintf("k%d", i%3), []Input{Success, Failure, Transient}[i%3], "", t0)
			}
		}()
	}
	wg.Wait()
	require.Len(t, tr.Skills("s0"), 3)
}

func FuzzNext(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, seq []byte) {
		inputs := []Input{Success, Transient, Failure, Exhausted, Reset}
		s := Status{State: Healthy}
		for _, b := range seq {
			in := inputs[int(b)%len(inputs)]
			prev := s.State
			s, _ = Next(s, in, "", t0)
			if _, err := ParseState(string(s.State)); err != nil {
				t.Fatalf("invalid state %q", s.State)
			}
			if prev == PermanentFailure && s.State != PermanentFailure && in != Reset {
				t.Fatalf("left permanentFailure on %s", in)
			}
			if s.Failures < 0 || s.Failures >= FailureThresholdDefault {
				t.Fatalf("count %d out of range", s.Failures)
			}
		}
	})
}

func ExampleNext() {
	s := Status{State: Healthy}
	for _, in := range []Input{Failure, Failure, Failure, Success} {
		var tr Transition
		s, tr = Next(s, in, "exit code 1", t0)
		if tr.Changed {
			fmt.Println(tr.From, "->", tr.To)
		}
	}
	// Output:
	// healthy -> degraded
	// degraded -> healthy
}
