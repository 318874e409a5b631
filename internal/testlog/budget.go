package testlog

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Budget scales a test's waiting budget (how long it waits before it gives
// up, never a timing it asserts) to the machine running it: by 3 under the
// race detector, and by NARRATORIA_TEST_SCALE (a number, default 1) for a
// machine slower or busier than a quiet two-core one — CI running every
// package at once, or a CPU halved.
//
// It also grows when the machine is overloaded right now: by the 1-minute
// load average per CPU beyond 2 (make test alone keeps it near 1.5–2 on
// two cores; with two CPU-bound processes beside it, 2.5–3), so a budget
// taken while the CPU is halved is not the quiet machine's.
func Budget(d time.Duration) time.Duration {
	if raceEnabled {
		d *= 3
	}
	if f := overload(); f > 1 {
		d = time.Duration(float64(d) * f)
	}
	return Scaled(d)
}

// overload returns the 1-minute load average per CPU over 2, at least 1
// (1 when it cannot be read).
func overload() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 1
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 1
	}
	return max(1, load/float64(runtime.NumCPU())/2)
}

// Scaled scales d by NARRATORIA_TEST_SCALE only: for the few bounds a
// long chaos test asserts because an issue names them (the longest stall
// through leader elections), which the race detector's slowdown of our
// own code does not excuse.
func Scaled(d time.Duration) time.Duration {
	if v, err := strconv.ParseFloat(os.Getenv("NARRATORIA_TEST_SCALE"), 64); err == nil && v > 0 {
		return time.Duration(float64(d) * v)
	}
	return d
}

// PureTests is the pattern (go test -run) of the tests WithoutRace skips
// under the race detector; make test runs them in its second pass,
// without it; WithoutRace fails a test whose name does not match.
const PureTests = "^TestPure"

// WithoutRace skips t under the race detector. It is for pure
// computations (no NATS, no goroutines of ours: the planner over labelled
// prompt sets) that the detector slows tenfold and has nothing to find
// in; make test runs them in its second pass, without the detector.
func WithoutRace(t testing.TB) {
	t.Helper()
	if !strings.HasPrefix(t.Name(), "TestPure") {
		t.Fatalf("%s calls WithoutRace: its name must start with TestPure, or make test never runs it", t.Name())
	}
	if raceEnabled {
		t.Skip("a pure computation: make test runs it without the race detector")
	}
}

// Long skips a soak, chaos or heavy test unless NARRATORIA_LONG is set
// (make test-long), keeping make test within its budget; why says what
// makes it long.
func Long(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("NARRATORIA_LONG") == "" {
		t.Skipf("%s: set NARRATORIA_LONG=1 (make test-long)", why)
	}
}

// Race reports whether the test binary runs under the race detector: a
// simulation over many seeds runs fewer there (the detector slows it
// tenfold; its seeds run in full without it).
func Race() bool { return raceEnabled }
