// Package testlog routes slog output through testing.T, and records it so
// tests can assert on what was logged.
package testlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Recorder is a slog handler target that keeps every line.
type Recorder struct {
	mu    sync.Mutex
	t     testing.TB
	lines []string
	done  bool
}

// Write implements io.Writer for slog's text handler.
func (r *Recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := strings.TrimRight(string(bytes.Clone(p)), "\n")
	r.lines = append(r.lines, line)
	if !r.done {
		r.t.Log(line)
	}
	return len(p), nil
}

// Contains reports whether any line contains every one of parts.
func (r *Recorder) Contains(parts ...string) bool { return r.Count(parts...) > 0 }

// Count reports how many lines contain every one of parts.
func (r *Recorder) Count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
outer:
	for _, l := range r.lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue outer
			}
		}
		n++
	}
	return n
}

// New returns a logger writing to t.Log and a recorder of its lines.
func New(t testing.TB) (*slog.Logger, *Recorder) {
	r := &Recorder{t: t}
	t.Cleanup(func() {
		r.mu.Lock()
		r.done = true // t.Log after the test ends panics
		r.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelDebug})), r
}
