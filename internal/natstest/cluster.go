package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
)

// Cluster is n nats-servers with JetStream, routed to each other on
// loopback, for tests of replicated (R3) streams and of node failures.
type Cluster struct {
	// Servers are the nodes, in start order.
	Servers []*server.Server
}

// URLs returns every node's client URL, comma separated (a client
// connects to any and fails over to the others).
func (c *Cluster) URLs() string {
	var out string
	for i, s := range c.Servers {
		if i > 0 {
			out += ","
		}
		out += s.ClientURL()
	}
	return out
}

// Connect opens a connection to the cluster, closed at cleanup.
func (c *Cluster) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("natstest: connect to cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// pickPort and readyWait are variables for the test of StartCluster's
// retry: how a node's route port is picked, and how long a node may take
// to be ready.
var (
	pickPort  = freePort
	readyWait = 10 * time.Second
)

// freePort returns a loopback port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartCluster starts n routed nodes with JetStream (temporary stores,
// shut down at cleanup) and waits until JetStream has a meta leader.
// The route ports are picked free before the nodes bind them, so another
// process (a test package running alongside) can take one in between; a
// node not ready within 10 s is taken for that, and the cluster is started
// again on other ports, three times at most.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	var c *Cluster
	for try := 1; ; try++ {
		var err error
		if c, err = startNodes(t, n); err == nil {
			break
		}
		if try == 3 {
			t.Fatalf("natstest: %v", err)
		}
		t.Logf("natstest: %v; starting the cluster again on other ports", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: no JetStream meta leader after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startNodes starts n routed nodes and waits until each takes
// connections; on failure it shuts down the nodes it started.
func startNodes(t testing.TB, n int) (*Cluster, error) {
	ports := make([]int, n)
	for i := range ports {
		ports[i] = pickPort(t)
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "narratoria-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			c.shutdown()
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		go s.Start()
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(readyWait) {
			c.shutdown()
			return nil, fmt.Errorf("node %s not ready", s.Name())
		}
	}
	t.Cleanup(c.shutdown)
	return c, nil
}

// shutdown stops every node and waits for each.
func (c *Cluster) shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Server returns the cluster as a Server (its S is the first node; clients
// connect there) with the product's streams and buckets provisioned with
// replicas replicas.
func (c *Cluster) Server(t testing.TB, replicas int) *Server {
	t.Helper()
	nc := c.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	cfg := bus.Config{URL: c.URLs(), Name: t.Name(), Replicas: replicas}.WithDefaults()
	Retry(t, "provision the cluster", 60*time.Second, 30*time.Second, func(ctx context.Context) error {
		return bus.Provision(ctx, js, cfg)
	})
	return &Server{S: c.Servers[0], NC: nc, JS: js, Bus: cfg}
}

// Retry calls call, each time with a context of per, every 200 ms until it
// returns nil; after total it fails the test with the last error, naming
// what was tried. A new cluster takes a while to accept replicated streams.
func Retry(t testing.TB, what string, total, per time.Duration, call func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), per)
		err := call(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
