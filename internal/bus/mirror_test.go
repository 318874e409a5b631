package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

// silencingKV is a real bucket whose first watch falls silent after the
// current values, without ending: what a watch whose consumer nats.go
// failed to recreate does.
type silencingKV struct {
	jetstream.KeyValue
	watches atomic.Int32
}

func (kv *silencingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := kv.KeyValue.WatchAll(ctx, opts...)
	if err != nil || kv.watches.Add(1) > 1 {
		return w, err
	}
	return silenced(w), nil
}

// silencedWatch passes on a watch's updates up to the end of its current
// values, then nothing, and never closes.
type silencedWatch struct {
	w    jetstream.KeyWatcher
	out  chan jetstream.KeyValueEntry
	stop sync.Once
	done chan struct{}
}

func silenced(w jetstream.KeyWatcher) *silencedWatch {
	s := &silencedWatch{w: w, out: make(chan jetstream.KeyValueEntry, 256), done: make(chan struct{})}
	go func() {
		for e := range w.Updates() {
			select {
			case s.out <- e:
			case <-s.done:
				return
			}
			if e == nil {
				break
			}
		}
		<-s.done
	}()
	return s
}

func (s *silencedWatch) Updates() <-chan jetstream.KeyValueEntry { return s.out }

func (s *silencedWatch) Stop() error {
	s.stop.Do(func() { close(s.done) })
	bus.StopWatch(s.w)
	return nil
}

// TestMirrorReplacesASilentWatch: a watch that falls silent while its
// bucket takes writes is replaced, and the mirror sees the writes it
// missed; a quiet bucket's silence replaces nothing.
func TestMirrorReplacesASilentWatch(t *testing.T) {
	defer func(d time.Duration) { *bus.WatchSilence = d }(*bus.WatchSilence)
	*bus.WatchSilence = 200 * time.Millisecond
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	real, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "mirror"})
	require.NoError(t, err)
	_, err = real.Put(ctx, "k", []byte("0"))
	require.NoError(t, err)
	// The bucket's last revision is one no watch delivers: a key purged,
	// its marker removed.
	_, err = real.Put(ctx, "gone", []byte("x"))
	require.NoError(t, err)
	require.NoError(t, real.Purge(ctx, "gone"))
	require.NoError(t, real.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)))
	kv := &silencingKV{KeyValue: real}
	log, rec := testlog.New(t)
	var mu sync.Mutex
	seen := map[string]string{}
	require.NoError(t, bus.Mirror(ctx, kv, log, func(e jetstream.KeyValueEntry) {
		mu.Lock()
		seen[e.Key()] = string(e.Value())
		mu.Unlock()
	}))
	get := func() string { mu.Lock(); defer mu.Unlock(); return seen["k"] }
	require.Equal(t, "0", get(), "the current values")

	// Quiet for several silences, behind a last revision it will never
	// deliver: the watch is kept.
	time.Sleep(15 * *bus.WatchSilence)
	require.EqualValues(t, 1, kv.watches.Load(), "a quiet bucket's watch is not replaced")

	// The bucket takes writes the silent watch does not deliver.
	var i int
	require.Eventually(t, func() bool {
		i++
		_, err := real.Put(ctx, "k", fmt.Appendf(nil, "%d", i))
		require.NoError(t, err)
		return get() != "0"
	}, testlog.Budget(10*time.Second), 50*time.Millisecond, "the mirror sees the writes its silent watch missed")
	require.EqualValues(t, 2, kv.watches.Load())
	require.True(t, rec.Contains("bucket watch silent while the bucket took writes; watching again", "bucket=mirror"))
}
