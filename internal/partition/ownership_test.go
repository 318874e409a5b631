package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/election"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
)

// TestOwnershipSaysWhyItWasLost: a write refused by the fence ends the
// ownership once, and Why tells a newer owner's fence from a fence that
// vanished with its stream's contents.
func TestOwnershipSaysWhyItWasLost(t *testing.T) {
	t.Parallel()
	log, _ := testlog.New(t)
	js, err := jetstream.New(natstest.Start(t).Connect(t))
	require.NoError(t, err)
	ctx := context.Background()
	st, _ := fencedStream(t, js, 1)

	first, err := Take(ctx, js, "tester", "a", 0, election.Term{}, log, "w.fence")
	require.NoError(t, err)
	defer first.Release()
	require.Equal(t, "W", first.Fences[0].Stream)
	require.True(t, first.Held())
	require.Contains(t, first.Why(ctx), "still this tester's")

	second, err := Take(ctx, js, "tester", "b", 0, election.Term{}, log, "w.fence")
	require.NoError(t, err)
	defer second.Release()
	require.Contains(t, first.Why(ctx), "another tester raised a newer fence on w.fence")

	// The first owner's ordered writer is refused: the ownership ends.
	w := first.Writer(ctx, 0, "a test write", WriterConfig{Ordered: true})
	defer w.Abort()
	_, err = w.Publish(&nats.Msg{Subject: "w.k", Data: []byte("x")}).Wait(ctx)
	require.True(t, Refused(err), "%v", err)
	select {
	case <-first.Context().Done():
	case <-time.After(testlog.Scaled(5 * time.Second)):
		t.Fatal("a refused write did not end the ownership")
	}
	require.False(t, first.Held())
	require.True(t, second.Held())

	require.NoError(t, st.Purge(ctx))
	require.Contains(t, second.Why(ctx), "is gone from W")
}

// TestHoldingsRefuseAnEndedOwnership: a partition whose ownership ended
// before it registered is not added (the check is made under the lock
// Remove takes), and only its own holder removes it.
func TestHoldingsRefuseAnEndedOwnership(t *testing.T) {
	h := NewHoldings[*int](2, nil)
	a, b := new(int), new(int)
	ctx, cancel := context.WithCancel(context.Background())
	require.True(t, h.Add(ctx, 0, a))
	require.Equal(t, []int{0}, h.Owned())
	require.False(t, h.All())
	h.Remove(0, b) // not its holder
	require.Equal(t, a, h.Get(0))
	cancel()
	require.False(t, h.Add(ctx, 1, b))
	require.Nil(t, h.Get(1))
	h.Remove(0, a)
	require.Empty(t, h.Owned())
}

// TestWaitStoredThroughARestart: a fenced write sent while the server is
// down is sent again until the server is back and stores it — once,
// however many times it was sent.
func TestWaitStoredThroughARestart(t *testing.T) {
	t.Parallel()
	log, _ := testlog.New(t)
	srv := natstest.Start(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	st, _ := fencedStream(t, js, 1)
	own, err := Take(ctx, js, "tester", "a", 0, election.Term{}, log, "w.fence")
	require.NoError(t, err)
	defer own.Release()
	w := own.Writer(ctx, 0, "a test write", WriterConfig{Timeout: 500 * time.Millisecond})
	defer w.Abort()

	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		srv.RestartAfter(t, 2*time.Second) // down for 2 s
	}()
	for nc.IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	m := nats.NewMsg("w.k")
	m.Data = []byte("x")
	m.Header.Set(jetstream.MsgIDHeader, "once")
	ack, err := w.WaitStored(ctx, w.Publish(m), testlog.Scaled(30*time.Second))
	require.NoError(t, err)
	<-restarted
	require.Greater(t, w.Resent(), 0, "the write was not sent again")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.State.Msgs, "two fence markers and the write, once (stored at %d)", ack.Sequence)
}

// TestFenceRaisedOnAFullStream: a partition moves while its stream is
// full. The new owner's fence replaces the old marker (markers have one
// size), so it needs no room the stream lacks; the old owner's writes are
// refused from then on.
func TestFenceRaisedOnAFullStream(t *testing.T) {
	js, err := jetstream.New(natstest.Start(t).Connect(t))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"},
		MaxBytes: 8 << 10, Discard: jetstream.DiscardNew, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	old, err := Raise(ctx, js, "full.fence", "scheduler-old")
	require.NoError(t, err)
	i := 0
	for _, size := range []int{256, 16, 0} { // full to the last bytes
		for ; ; i++ {
			m := nats.NewMsg(fmt.Sprintf("full.k%d", i))
			m.Data = make([]byte, size)
			old.Stamp(m)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				require.True(t, client.Refused(err), "the stream is full: %v", err)
				break
			}
		}
	}
	// A plain new marker does not fit.
	_, err = js.Publish(ctx, "full.other", make([]byte, markerSize))
	require.True(t, client.Refused(err), "%v", err)

	successor, err := Raise(ctx, js, "full.fence", "scheduler-with-a-much-longer-identifier-than-the-old-one")
	require.NoError(t, err, "the fence is raised although the stream is full")
	require.Greater(t, successor.Seq, old.Seq)
	m := nats.NewMsg("full.late")
	old.Stamp(m)
	_, err = js.PublishMsg(ctx, m)
	require.True(t, Refused(err), "the old owner's write is refused by the fence: %v", err)

	// The successor's own write does not fit: it is refused at once, not
	// sent again for a minute.
	w := NewWriter(ctx, js, successor, WriterConfig{})
	defer w.Abort()
	big := nats.NewMsg("full.big")
	big.Data = make([]byte, 1024)
	_, err = w.WaitStored(ctx, w.Publish(big), time.Minute)
	require.True(t, client.Refused(err), "%v", err)
	require.Zero(t, w.Resent(), "a full stream's refusal is not sent again")
}
