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

// TestCooldownProbes: under a policy with a cool-down, a skill entering
// permanentFailure is probed once the cool-down is over: a success makes it
// healthy, a failure starts another cool-down; without one it waits for a
// reset, as §7 says.
func TestCooldownProbes(t *testing.T) {
	p := Policy{Cooldown: time.Minute}
	t0 := time.Unix(1000, 0)
	degraded := Status{State: Degraded, Failures: FailureThresholdDefault - 1}
	s, tr := p.Next(degraded, Failure, "exit 1", t0)
	if s.State != PermanentFailure || !tr.Changed || !s.ProbeAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("entering permanentFailure: %+v", s)
	}
	if s.Selectable(t0.Add(59 * time.Second)) {
		t.Fatal("selectable before the cool-down is over")
	}
	if !s.Selectable(t0.Add(time.Minute)) {
		t.Fatal("not selectable once the cool-down is over")
	}
	// A success before the cool-down (a plan naming the skill) changes nothing.
	if early, _ := p.Next(s, Success, "", t0.Add(time.Second)); early.State != PermanentFailure {
		t.Fatalf("a success before the cool-down healed the skill: %+v", early)
	}
	// The probe fails: another cool-down.
	failed, tr := p.Next(s, Transient, "timed out", t0.Add(2*time.Minute))
	if failed.State != PermanentFailure || tr.Changed || !failed.ProbeAt.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("a failed probe: %+v", failed)
	}
	if failed.Selectable(t0.Add(2*time.Minute + time.Second)) {
		t.Fatal("selectable again right after a failed probe")
	}
	// The next probe succeeds: healthy, no probe time left.
	healed, tr := p.Next(failed, Success, "", t0.Add(3*time.Minute))
	if healed.State != Healthy || !tr.Changed || !healed.ProbeAt.IsZero() || healed.Reason != "a probe succeeded after the cool-down" {
		t.Fatalf("a succeeded probe: %+v", healed)
	}
	// Without a cool-down: stays until a reset, never selectable.
	stuck, _ := Next(degraded, Failure, "exit 1", t0)
	if !stuck.ProbeAt.IsZero() || stuck.Selectable(t0.Add(24*time.Hour)) {
		t.Fatalf("no cool-down: %+v", stuck)
	}
	if again, _ := Next(stuck, Success, "", t0.Add(24*time.Hour)); again.State != PermanentFailure {
		t.Fatal("a success healed a skill with no cool-down")
	}
	if reset, _ := p.Next(failed, Reset, "", t0); reset.State != Healthy || !reset.ProbeAt.IsZero() {
		t.Fatalf("a reset: %+v", reset)
	}
}
