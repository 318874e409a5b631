package bus_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
)

// TestConsumeInOrderAfterALostDelivery: a delivery the consumer never
// handed over — taken by another pull, as a pull broken by a leader's
// death loses it — would come again only after the ack wait, behind newer
// messages. ConsumeInOrder sees the gap in the consumer sequence, holds
// the newer message back, rewinds, and hands every message over in stream
// order, within seconds rather than the 30 s ack wait.
func TestConsumeInOrderAfterALostDelivery(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	js := srv.JS
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDER", Subjects: []string{"order.>"}})
	require.NoError(t, err)
	cfg := jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 1000}
	_, err = js.CreateConsumer(ctx, "ORDER", cfg)
	require.NoError(t, err)
	pub := func(i int) {
		_, err := js.Publish(ctx, "order.s", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	pub(1)
	pub(2)

	var mu sync.Mutex
	var handed []int
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	first := make(chan struct{})
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.ConsumeInOrder(cctx, js, "ORDER", cfg, 1, slog.New(slog.DiscardHandler), func(m jetstream.Msg) {
			n, _ := strconv.Atoi(string(m.Data()))
			mu.Lock()
			handed = append(handed, n)
			mu.Unlock()
			if n == 1 {
				close(first)
				<-release // message 2 waits in the one-message buffer meanwhile
			}
			_ = m.Ack()
		}, nil)
	}()
	t.Cleanup(func() { releaseAll(); cancel(); <-done })
	<-first
	// Our one-message pull is taken up (by message 2 in its buffer, or
	// by a request for it still on its way): another pull takes message 2
	// or 3, whichever ours did not, and never acknowledges it.
	pub(3)
	c, err := js.Consumer(ctx, "ORDER", "c")
	require.NoError(t, err)
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	require.NoError(t, err)
	var stolen []int
	for m := range batch.Messages() {
		n, _ := strconv.Atoi(string(m.Data()))
		stolen = append(stolen, n)
	}
	require.Len(t, stolen, 1, "the other pull took a message")
	require.Contains(t, []int{2, 3}, stolen[0])
	pub(4)
	releaseAll()

	firstTimes := func() []int {
		mu.Lock()
		defer mu.Unlock()
		seen := map[int]bool{}
		var out []int
		for _, n := range handed {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(firstTimes()) == 4 }, 10*time.Second, 20*time.Millisecond,
		"every message handed over well within the ack wait: %v", firstTimes())
	require.Equal(t, []int{1, 2, 3, 4}, firstTimes(), "in stream order")
}
