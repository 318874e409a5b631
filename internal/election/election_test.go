package election

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ttl = 600 * time.Millisecond

func bucket(t *testing.T) jetstream.KeyValue {
	srv := natstest.Start(t)
	kv, err := srv.JS.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "lease"})
	require.NoError(t, err)
	return kv
}

// candidate runs one candidate; active counts the leaders acting now and
// max the most ever seen at once.
type candidate struct {
	e      *Election
	cancel context.CancelFunc
	done   chan struct{}
	terms  atomic.Int32
}

func start(t *testing.T, kv jetstream.KeyValue, id string, active, most *atomic.Int32) *candidate {
	e, err := New(kv, Config{ID: id, Key: "leader", TTL: ttl})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		e.Run(ctx, func(lctx context.Context, term Term) {
			c.terms.Add(1)
			n := active.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			<-lctx.Done()
			active.Add(-1)
		})
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *candidate) stop() {
	c.cancel()
	<-c.done
}

func leaders(cs []*candidate) []*candidate {
	var out []*candidate
	for _, c := range cs {
		if c.e.Leading() {
			out = append(out, c)
		}
	}
	return out
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{Key: "k"}, {ID: "a"}, {ID: "a", Key: "k", TTL: time.Millisecond}} {
		_, err := New(nil, c)
		require.ErrorIs(t, err, ErrConfig)
	}
}

// TestOneLeaderThroughChurn: three candidates; the leader is stopped
// gracefully (immediate handover) or crashes (its lease lapses) again and
// again; there is always at most one leader acting, and a new one comes.
func TestOneLeaderThroughChurn(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	var active, most atomic.Int32
	var cs []*candidate
	for i := range 3 {
		cs = append(cs, start(t, kv, fmt.Sprint("c", i), &active, &most))
	}
	n := 3
	for round := range 6 {
		require.Eventually(t, func() bool { return len(leaders(cs)) == 1 }, testlog.Budget(5*time.Second), 10*time.Millisecond, "round %d", round)
		l := leaders(cs)[0]
		if round%2 == 0 {
			l.stop() // graceful: releases the lease
		} else {
			// crash: the renewer stalls and the process stops acting
			l.e.pause = func() { time.Sleep(10 * ttl) }
			go l.stop()
		}
		for i, c := range cs {
			if c == l {
				cs[i] = start(t, kv, fmt.Sprint("c", n), &active, &most)
				n++
			}
		}
	}
	require.Eventually(t, func() bool { return len(leaders(cs)) == 1 }, testlog.Budget(5*time.Second), 10*time.Millisecond)
	require.EqualValues(t, 1, most.Load(), "never two leaders acting at once")
}

// TestStepsDownOnRenewalFailure: renewals that keep failing — here the
// bucket is gone, not a lost race — end leadership at TTL/2.
func TestStepsDownOnRenewalFailure(t *testing.T) {
	srv := natstest.Start(t)
	kv, err := srv.JS.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "lease"})
	require.NoError(t, err)
	var active, most atomic.Int32
	c := start(t, kv, "only", &active, &most)
	require.Eventually(t, c.e.Leading, testlog.Budget(5*time.Second), 10*time.Millisecond)
	require.NoError(t, srv.JS.DeleteKeyValue(t.Context(), "lease"))
	require.Eventually(t, func() bool { return active.Load() == 0 }, testlog.Budget(5*time.Second), 10*time.Millisecond,
		"the leader stepped down")
}

// TestPausedLeaderStepsDown: a leader whose renewer is stalled past TTL/2
// stops leading without waiting for anyone; a challenger then takes over
// after a TTL, and the two never act at once.
func TestPausedLeaderStepsDown(t *testing.T) {
	kv := bucket(t)
	var active, most atomic.Int32
	a := start(t, kv, "a", &active, &most)
	require.Eventually(t, a.e.Leading, testlog.Budget(5*time.Second), 10*time.Millisecond)
	var once sync.Once
	a.e.pause = func() { once.Do(func() { time.Sleep(ttl) }) }
	b := start(t, kv, "b", &active, &most)
	require.Eventually(t, func() bool { return b.terms.Load() == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	require.EqualValues(t, 1, most.Load(), "never two leaders at once")
}

// TestRidesThroughAStoreOutage: the lease's store stops answering for
// longer than the renewal interval but less than TTL/2 after the last
// renewal — here its stream is deleted and put back as it was, which is
// what a client sees while a replicated bucket's stream elects a leader
// (every write refused at once: no responders). A renewal fails during
// the outage, and the leader keeps leading — one term, never stepping
// down — because no one could have taken the lease through a store that
// did not answer. Stepping down at the first failed renewal tore down
// every partition at each election of a 3-node cluster.
func TestRidesThroughAStoreOutage(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := t.Context()
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "lease"})
	require.NoError(t, err)
	const long = 12 * time.Second // renewals every 2 s, deadline 6 s after one
	e, err := New(kv, Config{ID: "only", Key: "leader", TTL: long})
	require.NoError(t, err)
	var terms, failed atomic.Int32
	e.failed = func() { failed.Add(1) }
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(rctx, func(lctx context.Context, _ Term) { terms.Add(1); <-lctx.Done() })
	}()
	defer func() { cancel(); <-done }()
	require.Eventually(t, e.Leading, testlog.Budget(5*time.Second), 10*time.Millisecond)
	// Right after a renewal, the store goes away.
	w, err := kv.Watch(ctx, "leader", jetstream.UpdatesOnly())
	require.NoError(t, err)
	<-w.Updates()
	require.NoError(t, w.Stop())
	st, err := srv.JS.Stream(ctx, "KV_lease")
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	last, err := kv.Get(ctx, "leader")
	require.NoError(t, err)
	require.NoError(t, srv.JS.DeleteStream(ctx, "KV_lease"))
	// The next renewal (2 s on) fails; the store comes back as it was
	// (the lease at its revision) before the deadline (6 s on).
	require.Eventually(t, func() bool { return failed.Load() > 0 }, long/2, 5*time.Millisecond, "a renewal failed")
	cfg.FirstSeq = last.Revision()
	_, err = srv.JS.CreateStream(ctx, cfg)
	require.NoError(t, err)
	rev, err := kv.Put(ctx, "leader", last.Value())
	require.NoError(t, err)
	require.Equal(t, last.Revision(), rev)
	require.Eventually(t, func() bool {
		e, err := kv.Get(ctx, "leader")
		return err == nil && e.Revision() > rev
	}, testlog.Budget(5*time.Second), 10*time.Millisecond, "renewed after the outage")
	require.True(t, e.Leading(), "still leading")
	require.EqualValues(t, 1, terms.Load(), "one term through the outage")
}

// TestTakesItsOwnLeaseBack: a candidate that stepped down (a renewal not
// confirmed in time) campaigns again — a partition manager starts the
// campaign knowing the key's revision from its watch — and finds the key
// still naming it: no one took it, so it takes it back at once, as its
// own, instead of waiting a TTL for "the leader's lease" (its own) to
// lapse. Waiting it out cost every partition a full TTL of standstill
// after each long election on a cluster.
func TestTakesItsOwnLeaseBack(t *testing.T) {
	kv := bucket(t)
	var rev uint64
	e, err := New(kv, Config{ID: "only", Key: "leader", TTL: ttl, Seen: func() (uint64, time.Time) { return rev, time.Now() }})
	require.NoError(t, err)
	rev, err = kv.Create(t.Context(), "leader", e.value()) // the term it stepped down from
	require.NoError(t, err)
	terms := make(chan Term, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx, func(lctx context.Context, term Term) {
			select {
			case terms <- term:
			default:
			}
			<-lctx.Done()
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case term := <-terms:
		require.Empty(t, term.Previous, "taken as its own, not over a lapsed lease")
	case <-time.After(testlog.Budget(10 * ttl)):
		t.Fatal("never leading")
	}
}
