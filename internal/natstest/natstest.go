// Package natstest starts real nats-server processes with JetStream for
// tests: a free port, a temporary store, stopped when the test ends. The
// server is the version in go.mod, built once without the race detector
// (Binary), so a test may stop it, SIGKILL it and start it again on the
// same store, as an operator or a crash would.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
)

// Server is a running test server with a client connection and the product's
// streams and buckets provisioned.
type Server struct {
	// NC is a client connection (closed at cleanup).
	NC *nats.Conn
	// JS is a JetStream handle on NC.
	JS jetstream.JetStream
	// Bus is the bus configuration that reaches the server.
	Bus bus.Config

	node *node
	cfg  nodeConfig
	url  string // for a cluster: every node's
}

// URL returns the client URL (for a cluster, every node's).
func (s *Server) URL() string { return s.url }

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

// StartWith starts a server for t with these options (a small MaxPayload,
// say); Host, Port and StoreDir are always loopback, a free port and a
// temporary folder, and Debug is ignored (the server's log is in its
// folder and ends any error).
func StartWith(t testing.TB, o embedded.Options) *Server {
	t.Helper()
	cfg := nodeConfig{name: "natstest", port: -1, maxPayload: o.MaxPayload}
	if cfg.maxPayload == 0 {
		cfg.maxPayload = embedded.MaxPayloadDefault
	}
	n, err := newNode(t, cfg)
	if err == nil {
		err = n.start(readyWait)
	}
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(n.stop)
	// Before the server stops (cleanups run last first): a failed test
	// shows the end of the server's log (a warning of the server's own —
	// an API queue past its limit, a slow consumer — explains many a
	// timeout on the client side).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("natstest: the server's log ends:\n%s", n.tail())
		}
	})
	cfg.port = n.port() // the same port after a restart
	if err := n.write(cfg); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	nc, err := nats.Connect(n.client)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	bcfg := bus.Config{URL: n.client, Name: t.Name()}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, js, bcfg); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return &Server{NC: nc, JS: js, Bus: bcfg, node: n, cfg: cfg, url: n.client}
}
