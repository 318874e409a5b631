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

// TestStepsDownOnRenewalFailure: a renewal that fails for any reason —
// here the bucket is gone, not a lost race — ends leadership.
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
