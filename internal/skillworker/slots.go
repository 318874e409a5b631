package skillworker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// slots bounds how many scripts a worker runs at once (a token channel
// sized to the concurrency).
type slots struct {
	tokens chan struct{}
}

func newSlots(n int) *slots { return &slots{tokens: make(chan struct{}, n)} }

// acquire takes a slot for msg, telling JetStream the job is in progress
// every `every` while it waits. It returns false if ctx ends first.
func (s *slots) acquire(ctx context.Context, msg jetstream.Msg, every time.Duration) bool {
	select {
	case s.tokens <- struct{}{}:
		return true
	default:
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case s.tokens <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
			_ = msg.InProgress()
		}
	}
}

func (s *slots) release() { <-s.tokens }
