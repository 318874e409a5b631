package skillworker

import (
	"context"
	"time"
)

// pollInterval is how often an idle puller looks for jobs that made no
// new message (redeliveries), and the longest a redelivered job waits.
const pollInterval = 250 * time.Millisecond

// slots bounds how many scripts a worker runs at once: a counter of free
// slots that pullers take from in batches and give back.
type slots struct {
	free chan struct{} // one token per free slot
}

func newSlots(n int) *slots {
	s := &slots{free: make(chan struct{}, n)}
	for range n {
		s.free <- struct{}{}
	}
	return s
}

// take waits for at least one free slot and takes every slot free now;
// it returns how many, 0 when ctx ended first.
func (s *slots) take(ctx context.Context) int {
	select {
	case <-s.free:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for {
		select {
		case <-s.free:
			n++
		default:
			return n
		}
	}
}

// give returns n slots.
func (s *slots) give(n int) {
	for range n {
		s.free <- struct{}{}
	}
}
