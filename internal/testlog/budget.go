package testlog

import (
	"os"
	"strconv"
	"time"
)

// Budget scales a test's waiting budget (how long it waits before it gives
// up, never a timing it asserts) to the machine running it: by 3 under the
// race detector, and by NARRATORIA_TEST_SCALE (a number, default 1) for a
// machine slower or busier than a quiet two-core one — CI running every
// package at once, or a CPU halved.
func Budget(d time.Duration) time.Duration {
	if raceEnabled {
		d *= 3
	}
	return Scaled(d)
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
