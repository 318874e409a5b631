// Package natstest starts a real embedded nats-server with JetStream for
// tests: a free port, a temporary store, shut down when the test ends.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
)

// Server is a running test server with a client connection and the product's
// streams and buckets provisioned.
type Server struct {
	// S is the server.
	S *server.Server
	// NC is a client connection (closed at cleanup).
	NC *nats.Conn
	// JS is a JetStream handle on NC.
	JS jetstream.JetStream
	// Bus is the bus configuration that reaches the server.
	Bus bus.Config
}

// URL returns the client URL.
func (s *Server) URL() string { return s.S.ClientURL() }

// Connect opens another client connection, closed at cleanup.
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Start starts a server for t with the product's streams and buckets.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, embedded.Options{})
}

// StartWith starts a server for t with these options (Port and StoreDir
// are always a free port and a temporary folder), e.g. a small MaxPayload.
func StartWith(t testing.TB, o embedded.Options) *Server {
	t.Helper()
	o.Port, o.StoreDir = -1, t.TempDir()
	s, err := embedded.Start(o)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	cfg := bus.Config{URL: s.ClientURL(), Name: t.Name()}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return &Server{S: s, NC: nc, JS: js, Bus: cfg}
}
