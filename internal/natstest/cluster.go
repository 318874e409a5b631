package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
)

// Cluster is n nats-server processes with JetStream, routed to each other
// on loopback, for tests of replicated (R3) streams and of node failures.
type Cluster struct {
	nodes []*node
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// URLs returns every node's client URL, comma separated (a client
// connects to any and fails over to the others).
func (c *Cluster) URLs() string {
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, n.client)
	}
	return strings.Join(urls, ",")
}

// Kill ends node i (from 0) with SIGKILL.
func (c *Cluster) Kill(i int) { c.nodes[i].kill() }

// Start starts node i again (after Kill) on its port and store.
func (c *Cluster) Start(t testing.TB, i int) {
	t.Helper()
	if err := c.nodes[i].start(readyWait); err != nil {
		t.Fatalf("natstest: %v", err)
	}
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
// stopped at cleanup) and waits until JetStream answers (it has a meta
// leader). The route ports are picked free before the nodes bind them, so
// another process (a test package running alongside) can take one in
// between; a node that cannot start is taken for that, and the cluster is
// started again on other ports, three times at most.
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
	nc := c.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	Retry(t, "JetStream meta leader", 30*time.Second, 2*time.Second, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	})
	return c
}

// startNodes starts n routed nodes and waits until each takes
// connections; on failure it stops the nodes it started.
func startNodes(t testing.TB, n int) (*Cluster, error) {
	routes := make([]int, n)
	for i := range routes {
		routes[i] = pickPort(t)
	}
	c := &Cluster{}
	for i := range n {
		nd, err := newNode(t, nodeConfig{name: fmt.Sprintf("n%d", i+1), port: -1,
			maxPayload: embedded.MaxPayloadDefault, cluster: "narratoria-test", routePort: routes[i], routes: routes})
		if err != nil {
			c.stop()
			return nil, err
		}
		if err := nd.start(readyWait); err != nil {
			c.stop()
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		c.nodes = append(c.nodes, nd)
	}
	for i, nd := range c.nodes { // the same client port when started again
		if err := nd.write(nodeConfig{name: nd.name, port: nd.port(),
			maxPayload: embedded.MaxPayloadDefault, cluster: "narratoria-test", routePort: routes[i], routes: routes}); err != nil {
			c.stop()
			return nil, err
		}
	}
	t.Cleanup(c.stop)
	return c, nil
}

// stop stops every node.
func (c *Cluster) stop() {
	for _, n := range c.nodes {
		n.stop()
	}
}

// Server returns the cluster as a Server (clients connect to any node)
// with the product's streams and buckets provisioned with replicas
// replicas. Its Restart is not for a cluster: use Kill and Start.
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
	return &Server{NC: nc, JS: js, Bus: cfg, node: c.nodes[0], url: c.URLs()}
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
