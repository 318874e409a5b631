package testlog

import "go.uber.org/goleak"

// UpstreamLeaks are the goleak options for goroutines a library we use
// leaks where our code cannot stop them. Each names the library version
// and the race; remove it when an upgrade fixes the race.
//
// nats.go v1.55.0, jetstream: ObjectStore.Put opens a JetStream context of
// its own per call, whose first asynchronous publish starts a goroutine
// that reads the context's connection-status channel, and Put clears that
// channel when it returns. When Put returns before the goroutine first
// runs (a small object on a busy machine), the goroutine reads a nil
// channel and waits forever: one goroutine per such Put, in the skill
// worker that stores assets (docs/decisions/, "An upstream goroutine
// leak").
func UpstreamLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	}
}
