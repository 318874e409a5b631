package natstest

import (
	"testing"
	"time"
)

// Restart stops the server (SIGTERM) and starts it again on the same port
// and JetStream store, as an operator restarting nats-server would.
// Clients reconnect on their own.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.RestartAfter(t, 0)
}

// RestartAfter is Restart with the server down for d: an outage.
func (s *Server) RestartAfter(t testing.TB, d time.Duration) {
	t.Helper()
	s.node.stop()
	s.startAgain(t, d)
}

// KillAndRestart ends the server with SIGKILL (it may forget what it
// acknowledged in its last moments: writes not yet synced to disk) and
// starts it again on the same port and store after d.
func (s *Server) KillAndRestart(t testing.TB, d time.Duration) {
	t.Helper()
	s.node.kill()
	s.startAgain(t, d)
}

// startAgain starts the stopped server after d, retrying for 10 s while
// its port is still held.
func (s *Server) startAgain(t testing.TB, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.node.start(readyWait)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("natstest: restart: %v", err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
