package natstest

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/narratoria/runtime/internal/embedded"
)

// Restart shuts the server down and starts a new one on the same port and
// JetStream store, as an operator restarting nats-server would. Clients
// reconnect on their own. The new server is shut down at cleanup.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.RestartAfter(t, 0)
}

// RestartAfter is Restart with the server down for d: an outage.
func (s *Server) RestartAfter(t testing.TB, d time.Duration) {
	t.Helper()
	_, portStr, err := net.SplitHostPort(s.S.Addr().String())
	if err != nil {
		t.Fatalf("natstest: server address: %v", err)
	}
	port, _ := strconv.Atoi(portStr)
	store := s.S.StoreDir()
	if filepath.Base(store) == server.JetStreamStoreDir {
		store = filepath.Dir(store)
	}
	s.S.Shutdown()
	s.S.WaitForShutdown()
	time.Sleep(d)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, err := embedded.Start(embedded.Options{Port: port, StoreDir: store})
		if err == nil {
			s.S = ns
			t.Cleanup(func() {
				ns.Shutdown()
				ns.WaitForShutdown()
			})
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
