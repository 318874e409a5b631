package scheduler

import "sync"

// mailbox is an actor's unbounded inbox: senders never block (so one busy
// plan never stalls the consumer feeding every plan), and the actor takes
// everything queued at once.
type mailbox struct {
	mu     sync.Mutex
	q      []any
	signal chan struct{}
}

func newMailbox() *mailbox { return &mailbox{signal: make(chan struct{}, 1)} }

func (m *mailbox) put(v any) {
	m.mu.Lock()
	m.q = append(m.q, v)
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

func (m *mailbox) take() []any {
	m.mu.Lock()
	q := m.q
	m.q = nil
	m.mu.Unlock()
	return q
}
