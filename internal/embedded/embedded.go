// Package embedded runs a nats-server with JetStream inside the process, for
// `narratoria up` and for tests.
package embedded

import (
	"cmp"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Defaults of Options.
const (
	// HostDefault keeps the embedded server on loopback.
	HostDefault = "127.0.0.1"
	// PortDefault is the standard NATS client port.
	PortDefault = 4222
	// MaxPayloadDefault lets plans and outcomes of up to 8 MiB through.
	MaxPayloadDefault = 8 << 20
	// ReadyTimeoutDefault bounds the wait for the server to accept clients.
	ReadyTimeoutDefault = 10 * time.Second
)

// Options configures the embedded server.
type Options struct {
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port to listen on; -1 picks a free port. Default 4222.
	Port int
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// MaxPayload is the largest message. Default 8 MiB.
	MaxPayload int32
	// Debug turns on the server's own logs (to stderr).
	Debug bool
	// Mappings are subject mappings of the global account (the one
	// clients use without operator mode), source to destination
	// (bus.DoorMappings).
	Mappings map[string]string
	// Configure, when set, changes the server's options before it starts
	// (operator mode for tenants: tenancy.Authority.Configure).
	Configure func(*server.Options) error
}

// Start starts the server and waits until it accepts clients.
func Start(o Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded nats: StoreDir is required")
	}
	opts := &server.Options{
		ServerName: "narratoria-embedded",
		Host:       cmp.Or(o.Host, HostDefault),
		Port:       cmp.Or(o.Port, PortDefault),
		JetStream:  true,
		StoreDir:   o.StoreDir,
		MaxPayload: cmp.Or(o.MaxPayload, MaxPayloadDefault),
		NoSigs:     true,
		NoLog:      !o.Debug,
	}
	if o.Configure != nil {
		if err := o.Configure(opts); err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if o.Debug {
		s.ConfigureLogger()
	}
	// Before it listens: no client publishes before the mappings hold.
	for src, dst := range o.Mappings {
		if err := s.GlobalAccount().AddMapping(src, dst); err != nil {
			s.Shutdown()
			return nil, fmt.Errorf("embedded nats: mapping %s: %w", src, err)
		}
	}
	go s.Start()
	if !s.ReadyForConnections(ReadyTimeoutDefault) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after %s (is %s:%d already in use?)", ReadyTimeoutDefault, opts.Host, opts.Port)
	}
	return s, nil
}
