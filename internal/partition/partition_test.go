package partition

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/internal/election"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	count = 12
	ttl   = 600 * time.Millisecond
)

// owners counts, per partition, the instances acting as its owner now, and
// remembers the most ever seen at once.
type owners struct {
	mu   sync.Mutex
	now  map[int]int
	most int
}

func (o *owners) own(ctx context.Context, p int, _ election.Term) {
	o.mu.Lock()
	o.now[p]++
	o.most = max(o.most, o.now[p])
	o.mu.Unlock()
	<-ctx.Done()
	o.mu.Lock()
	o.now[p]--
	o.mu.Unlock()
}

type instance struct {
	m      *Manager
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, srv *natstest.Server, id string, o *owners) *instance {
	return startLogged(t, srv, id, o, nil)
}

func startLogged(t *testing.T, srv *natstest.Server, id string, o *owners, log *slog.Logger) *instance {
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(t.Context(), "partitions")
	require.NoError(t, err)
	m, err := New(kv, Config{ID: id, Count: count, TTL: ttl, Logger: log}, o.own)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{m: m, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(in.done); m.Run(ctx) }()
	t.Cleanup(in.stop)
	return in
}

func (in *instance) stop() {
	in.cancel()
	<-in.done
	in.nc.Close()
}

// balanced reports whether the instances own shares of ⌈P/N⌉ or ⌊P/N⌋
// that together cover every partition once.
func balanced(ins []*instance) bool {
	seen := map[int]bool{}
	for _, in := range ins {
		n := len(in.m.Owned())
		if n < count/len(ins) || n > (count+len(ins)-1)/len(ins) {
			return false
		}
		for _, p := range in.m.Owned() {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == count
}

// TestShareAndTakeover: three instances share the partitions fairly; a
// fourth joins and they rebalance; one stops gracefully and one crashes
// (its connection dies) and the others take their partitions over; no
// partition ever has two owners acting at once.
func TestShareAndTakeover(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, err := srv.JS.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "partitions"})
	require.NoError(t, err)
	o := &owners{now: map[int]int{}}
	log, rec := testlog.New(t)
	var ins []*instance
	for i := range 3 {
		ins = append(ins, startLogged(t, srv, fmt.Sprint("i", i), o, log))
	}
	require.Eventually(t, func() bool { return balanced(ins) }, testlog.Budget(15*time.Second), 20*time.Millisecond, "3 instances, 4 partitions each")
	ins = append(ins, start(t, srv, "i3", o))
	require.Eventually(t, func() bool { return balanced(ins) }, testlog.Budget(15*time.Second), 20*time.Millisecond, "a 4th joins: 3 each")
	ins[0].stop() // graceful
	ins = ins[1:]
	require.Eventually(t, func() bool { return balanced(ins) }, testlog.Budget(15*time.Second), 20*time.Millisecond, "after a graceful stop: 4 each")
	require.True(t, rec.Contains("partition: moved", "from=i0"), "a graceful hand-over is logged with from and to")
	ins[0].nc.Close() // crash: its leases lapse
	ins = ins[1:]
	require.Eventually(t, func() bool { return balanced(ins) }, testlog.Budget(20*time.Second), 20*time.Millisecond, "after a crash: 6 each")
	require.True(t, rec.Contains("partition: moved", "from=i1"), "a takeover after a crash is logged with from and to")
	o.mu.Lock()
	defer o.mu.Unlock()
	require.Equal(t, 1, o.most, "never two owners of a partition at once")
}

func TestOfIsStableAndSpread(t *testing.T) {
	require.Equal(t, Of("demo", 32), Of("demo", 32))
	hits := map[int]int{}
	for i := range 3200 {
		hits[Of(fmt.Sprint("session-", i), 32)]++
	}
	require.Len(t, hits, 32)
	for p, n := range hits {
		require.Greater(t, n, 50, "partition %d", p)
	}
}
