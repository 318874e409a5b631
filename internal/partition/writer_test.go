package partition

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
)

// fencedStream makes a stream "W" over w.> with the given replicas and
// raises a fence on w.fence.
func fencedStream(t *testing.T, js jetstream.JetStream, replicas int) (jetstream.Stream, Fence) {
	return fencedStreamAtomic(t, js, replicas, false)
}

// fencedStreamAtomic is fencedStream, the stream allowing atomic batches
// when atomic is set.
func fencedStreamAtomic(t *testing.T, js jetstream.JetStream, replicas int, atomic bool) (jetstream.Stream, Fence) {
	t.Helper()
	// A new cluster may not take an R3 stream yet, and a new R3 stream may
	// not have a leader yet: each call gets its own 10 s, and the whole
	// 90 s (make test-long starves a cluster with the simulation's seeds).
	var st jetstream.Stream
	var f Fence
	natstest.Retry(t, "create the stream", 90*time.Second, 10*time.Second, func(ctx context.Context) (err error) {
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Replicas: replicas, AllowAtomicPublish: atomic})
		return err
	})
	natstest.Retry(t, "raise the fence", 90*time.Second, 10*time.Second, func(ctx context.Context) (err error) {
		f, err = Raise(ctx, js, "w.fence", "me")
		return err
	})
	return st, f
}

// TestPipelinedFencedWritesClashOnReplicatedStream records the server
// behaviour the Writer exists for: on an R3 stream, writes stamped with one
// fence and sent without waiting refuse each other although no newer fence
// exists — a pipelining owner would think it lost its partition, and an
// earlier write could fail while a later one is stored.
func TestPipelinedFencedWritesClashOnReplicatedStream(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t, 3)
	js, err := jetstream.New(c.Connect(t))
	require.NoError(t, err)
	_, fence := fencedStream(t, js, 3)

	// How the writes interleave with replication varies: a few rounds show
	// both a refusal and a later write stored after it.
	refused, storedAfterRefusal := 0, false
	for round := 0; round < 10 && !storedAfterRefusal; round++ {
		var futures []jetstream.PubAckFuture
		for i := range 200 {
			m := nats.NewMsg(fmt.Sprintf("w.k.%d.%d", round, i))
			fence.Stamp(m)
			f, err := js.PublishMsgAsync(m)
			require.NoError(t, err)
			futures = append(futures, f)
		}
		refusedNow := false
		for _, f := range futures {
			select {
			case <-f.Ok():
				storedAfterRefusal = storedAfterRefusal || refusedNow
			case err := <-f.Err():
				require.True(t, Busy(err), "refused as busy, not by a newer fence: %v", err)
				refused, refusedNow = refused+1, true
			case <-time.After(10 * time.Second):
				t.Fatal("no acknowledgement")
			}
		}
	}
	require.Positive(t, refused, "pipelined fenced writes on R3 refused none: the Writer's one-at-a-time rule may be unneeded now")
	require.True(t, storedAfterRefusal, "a later write is stored after an earlier one was refused")
}

// writerCase is a fenced stream and an ordered Writer for it.
type writerCase struct {
	// atomic says the stream takes atomic batches (the Writer batches).
	atomic bool
	js     jetstream.JetStream
	st     jetstream.Stream
	w      *Writer
	fails  atomic.Int32 // OnFail calls
}

// eachReplicas runs f on a single server with an R1 stream (the Writer
// pipelines) and on a 3-node cluster with an R3 stream (one at a time).
//
// The two R3 cases share one cluster (a cluster costs seconds of CPU to
// start): each deletes its stream when it is done.
func eachReplicas(t *testing.T, f func(t *testing.T, c *writerCase)) {
	var cluster *nats.Conn
	for _, v := range []struct {
		r      int
		atomic bool
	}{{1, false}, {3, false}, {3, true}} {
		r := v.r
		name := fmt.Sprintf("R%d", r)
		if v.atomic {
			name += "-atomic"
		}
		if r > 1 && cluster == nil {
			cluster = natstest.StartCluster(t, r).Connect(t) // lives as long as t
		}
		t.Run(name, func(t *testing.T) {
			nc := cluster
			if r == 1 {
				nc = natstest.Start(t).NC
			}
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			if r > 1 {
				defer func() { _ = js.DeleteStream(context.Background(), "W") }()
			}
			c := &writerCase{js: js, atomic: v.atomic}
			var fence Fence
			c.st, fence = fencedStreamAtomic(t, js, r, v.atomic)
			c.w = NewWriter(context.Background(), js, fence, WriterConfig{Replicated: r > 1, Ordered: true,
				OnFail: func(error) { c.fails.Add(1) }})
			defer c.w.Close()
			f(t, c)
		})
	}
}

// TestWriterStoresConcurrentWrites: writes from many goroutines through one
// Writer are all stored, on one replica (pipelined) and on three (one at a
// time).
func TestWriterStoresConcurrentWrites(t *testing.T) {
	t.Parallel()
	eachReplicas(t, func(t *testing.T, c *writerCase) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				var last *Write
				for i := range 50 {
					last = c.w.Publish(nats.NewMsg(fmt.Sprintf("w.k.%d.%d", g, i)))
				}
				_, err := last.Wait(context.Background())
				require.NoError(t, err)
			})
		}
		wg.Wait()
		info, err := c.st.Info(context.Background())
		require.NoError(t, err)
		require.EqualValues(t, 201, info.State.Msgs, "the fence and 200 writes")
		require.Zero(t, c.fails.Load())
		if c.atomic {
			require.Positive(t, c.w.Batches(), "writes waiting behind one in flight went as atomic batches")
		} else {
			require.Zero(t, c.w.Batches())
		}
	})
}

// TestWriterStoresAPrefix: when a newer fence is raised while writes are
// queued, the writes stored are exactly those reported stored, they come
// first, every later write reports the refusal, and OnFail is told once.
func TestWriterStoresAPrefix(t *testing.T) {
	t.Parallel()
	eachReplicas(t, func(t *testing.T, c *writerCase) {
		var writes []*Write
		for i := range 300 {
			if i == 100 {
				_, err := Raise(context.Background(), c.js, "w.fence", "successor")
				require.NoError(t, err)
			}
			writes = append(writes, c.w.Publish(nats.NewMsg(fmt.Sprintf("w.k.%d", i))))
		}
		ok := 0
		for i, x := range writes {
			_, err := x.Wait(context.Background())
			if err == nil {
				require.Equal(t, ok, i, "write %d stored after a failed one", i)
				ok++
				continue
			}
			require.True(t, Refused(err), "write %d: %v", i, err)
		}
		require.Less(t, ok, 300, "the newer fence refused nothing")
		require.EqualValues(t, 1, c.fails.Load())
		info, err := c.st.Info(context.Background(), jetstream.WithSubjectFilter("w.k.>"))
		require.NoError(t, err)
		require.EqualValues(t, ok, len(info.State.Subjects), "stored = reported stored")
		for i := range ok {
			require.Contains(t, info.State.Subjects, fmt.Sprintf("w.k.%d", i))
		}
	})
}

// TestWriterRepairsAcrossARestart: the server restarts while an ordered
// Writer pipelines updates of a few subjects; every write is reported
// stored, and each subject's last stored value is the last one written
// (across a reconnect a write sent before the drop can be lost while later
// ones, buffered by the client, are stored: the Writer sends every write
// from the failed one on again, in order).
func TestWriterRepairsAcrossARestart(t *testing.T) {
	srv := natstest.Start(t)
	// A restart does not always fail a write (the client may buffer every
	// write across it): up to three rounds, until one does.
	for round := 1; ; round++ {
		if restartRound(t, srv) > 0 {
			return
		}
		require.Less(t, round, 3, "the restart failed no write in %d rounds: the test did not test the repair", round)
	}
}

// restartRound is one round of TestWriterRepairsAcrossARestart on its own
// stream and subjects; it returns how many writes were sent again.
func restartRound(t *testing.T, srv *natstest.Server) int {
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, fence := fencedStream(t, js, 1) // the same stream each round, its fence raised anew
	var fails atomic.Int32
	w := NewWriter(context.Background(), js, fence, WriterConfig{Ordered: true, OnFail: func(error) { fails.Add(1) }})
	defer w.Close()
	// The last writes of each subject straddle the restart: writing goes on
	// until the restart is over (on a quick machine the first 2,000 writes
	// could all be stored before the server went down).
	const keys, least = 8, 2000
	var writes []*Write
	restarted := make(chan struct{})
	over := func() bool {
		select {
		case <-restarted:
			return true
		default:
			return false
		}
	}
	n := 0
	for ; n < least || !over() || n%keys != 0; n++ {
		if n == least/2 {
			go func() { srv.Restart(t); close(restarted) }()
		}
		m := nats.NewMsg(fmt.Sprintf("w.k.%d", n%keys))
		m.Data = []byte(fmt.Sprint(n))
		writes = append(writes, w.Publish(m))
		if n > least/2 && n%20 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	for i, x := range writes {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, err := x.Wait(ctx)
		cancel()
		require.NoError(t, err, "write %d", i)
	}
	require.Zero(t, fails.Load())
	for k := range keys {
		last, err := st.GetLastMsgForSubject(context.Background(), fmt.Sprintf("w.k.%d", k))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(n-keys+k), string(last.Data), "subject w.k.%d ends with its last write", k)
	}
	return w.Resent()
}

// TestWriterFailuresOfAnUnorderedWriter: an unordered Writer (jobs) reports
// a failed write and goes on with the next; an ordered one keeps sending a
// write that cannot be stored until it is aborted, and does not call
// OnFail for that.
func TestWriterFailuresOfAnUnorderedWriter(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.NC)
	require.NoError(t, err)
	_, fence := fencedStream(t, js, 1)
	for _, replicated := range []bool{false, true} {
		w := NewWriter(context.Background(), js, fence, WriterConfig{Replicated: replicated, Timeout: time.Second})
		_, err := w.Publish(nats.NewMsg("nowhere.k")).Wait(context.Background())
		require.Error(t, err)
		_, err = w.Publish(nats.NewMsg("w.k.1")).Wait(context.Background())
		require.NoError(t, err)
		w.Close()
	}
	var fails atomic.Int32
	w := NewWriter(context.Background(), js, fence, WriterConfig{Ordered: true, Timeout: time.Second, OnFail: func(error) { fails.Add(1) }})
	stuck := w.Publish(nats.NewMsg("nowhere.k"))
	later := w.Publish(nats.NewMsg("w.k.2"))
	require.Eventually(t, func() bool { return w.Resent() >= 2 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	select {
	case <-stuck.Done():
		t.Fatal("a write that cannot be stored was given up while the writer runs")
	default:
	}
	w.Abort()
	_, err = stuck.Wait(context.Background())
	require.ErrorIs(t, err, ErrWriterClosed)
	_, err = later.Wait(context.Background())
	require.Error(t, err)
	require.Zero(t, fails.Load())
}

// TestWriterCloseWithin: a Writer closed with a bound lands what was
// queued; a write that cannot be stored fails once the bound is reached.
func TestWriterCloseWithin(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.NC)
	require.NoError(t, err)
	st, fence := fencedStream(t, js, 1)
	w := NewWriter(context.Background(), js, fence, WriterConfig{Ordered: true, Timeout: time.Second})
	var writes []*Write
	for i := range 100 {
		writes = append(writes, w.Publish(nats.NewMsg(fmt.Sprintf("w.k.%d", i))))
	}
	w.CloseWithin(10 * time.Second)
	for i, x := range writes {
		_, err := x.Wait(context.Background())
		require.NoError(t, err, "write %d", i)
	}
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 101, info.State.Msgs)

	w = NewWriter(context.Background(), js, fence, WriterConfig{Ordered: true, Timeout: time.Second})
	stuck := w.Publish(nats.NewMsg("nowhere.k"))
	w.CloseWithin(300 * time.Millisecond)
	_, err = stuck.Wait(context.Background())
	require.ErrorIs(t, err, ErrWriterClosed)
}

// TestRetryBusy: a write refused as busy is sent again until it is
// stored; any other error, or a refusal by a newer fence, ends at once; a
// busy refusal that lasts ends with ctx.
func TestRetryBusy(t *testing.T) {
	busy := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}
	fenced := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}
	calls := 0
	require.NoError(t, retryBusy(context.Background(), func() error {
		if calls++; calls < 3 {
			return busy
		}
		return nil
	}))
	require.Equal(t, 3, calls)

	for _, err := range []error{fenced, nats.ErrNoResponders} {
		calls = 0
		require.ErrorIs(t, retryBusy(context.Background(), func() error { calls++; return err }), err)
		require.Equal(t, 1, calls, "%v is not retried", err)
	}
	require.True(t, Refused(fenced) && !Busy(fenced))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.True(t, Busy(retryBusy(ctx, func() error { return busy })))
}

// TestWriterKeepsAWriteTheClientRefuses: a pipelined write the client
// cannot take (its connection is closed) is neither failed nor taken for
// a newer fence's refusal: the ordered Writer keeps sending it until it is
// aborted.
func TestWriterKeepsAWriteTheClientRefuses(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, fence := fencedStream(t, js, 1)
	var fails atomic.Int32
	w := NewWriter(context.Background(), js, fence, WriterConfig{Ordered: true, Timeout: time.Second, OnFail: func(error) { fails.Add(1) }})
	nc.Close()
	x := w.Publish(nats.NewMsg("w.k.1"))
	require.Eventually(t, func() bool { return w.Resent() >= 2 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	select {
	case <-x.Done():
		t.Fatal("a write the client refused was given up while the writer runs")
	default:
	}
	w.Abort()
	_, err = x.Wait(context.Background())
	require.ErrorIs(t, err, ErrWriterClosed)
	require.Zero(t, fails.Load())
}

// TestWriterClosed: a closed Writer refuses writes; Abort fails what is
// queued.
func TestWriterClosed(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.NC)
	require.NoError(t, err)
	_, fence := fencedStream(t, js, 1)
	w := NewWriter(context.Background(), js, fence, WriterConfig{Replicated: true, Ordered: true, OnFail: func(error) {}})
	w.Abort()
	_, err = w.Publish(nats.NewMsg("w.k.1")).Wait(context.Background())
	require.ErrorIs(t, err, ErrWriterClosed)
}

// TestWriterStoreRefusalFailsOneWrite: a write a full stream refuses fails
// alone and at once — never sent again, OnRefused told which, OnFail not
// called — and the writes after it are stored: an ordered Writer that
// waited for room behind it kept every later write of its partition
// waiting too, the writes that would have freed room among them.
func TestWriterStoreRefusalFailsOneWrite(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	st, fence := fencedStream(t, srv.JS, 1)
	cfg := st.CachedInfo().Config
	cfg.MaxBytes, cfg.Discard = 4<<10, jetstream.DiscardNew
	_, err := srv.JS.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)

	var fails, retries atomic.Int32
	var refusedSubjects []string
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(10*time.Second))
	defer cancel()
	w := NewWriter(ctx, srv.JS, fence, WriterConfig{Ordered: true,
		OnFail:  func(error) { fails.Add(1) },
		OnRetry: func(error, int) { retries.Add(1) },
		OnRefused: func(m *nats.Msg, err error) {
			mu.Lock()
			defer mu.Unlock()
			refusedSubjects = append(refusedSubjects, m.Subject)
		}})
	defer w.Abort()
	msg := func(subj string, n int) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = make([]byte, n)
		return m
	}
	before := w.Publish(msg("w.a", 100))
	big := w.Publish(msg("w.big", 8<<10))
	after := w.Publish(msg("w.c", 100))
	_, err = before.Wait(ctx)
	require.NoError(t, err)
	_, err = big.Wait(ctx)
	require.Error(t, err)
	require.True(t, client.Refused(err), "the store's refusal: %v", err)
	require.False(t, Refused(err), "not a newer fence's")
	_, err = after.Wait(ctx)
	require.NoError(t, err, "the write after the refused one is stored")
	_, err = w.Publish(msg("w.d", 100)).Wait(ctx)
	require.NoError(t, err, "and so are later ones")
	require.Zero(t, fails.Load(), "the owner keeps its partition")
	require.Zero(t, retries.Load(), "a refusal for good is not sent again")
	mu.Lock()
	require.Equal(t, []string{"w.big"}, refusedSubjects)
	mu.Unlock()
	_, err = st.GetLastMsgForSubject(ctx, "w.c")
	require.NoError(t, err)
}
