package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/pkg/client"
)

// TestPublishRetry: a publish sent while no stream takes its subject (as
// during a leader election: no responders) is sent again until the stream
// is there; a refusal is not retried.
func TestPublishRetry(t *testing.T) {
	srv := natstest.Start(t)
	go func() {
		time.Sleep(400 * time.Millisecond)
		_, _ = srv.JS.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
	}()
	ack, err := client.PublishRetry(t.Context(), srv.JS, msg("late.x"), 10*time.Second, jetstream.WithMsgID("one"))
	require.NoError(t, err)
	require.Equal(t, "LATE", ack.Stream)

	_, err = client.PublishRetry(t.Context(), srv.JS, msg("nowhere.x"), 500*time.Millisecond)
	require.Error(t, err, "gives up after retryFor")

	start := time.Now()
	_, err = client.PublishRetry(t.Context(), srv.JS, msg("late.x"), 10*time.Second, jetstream.WithExpectLastSequence(99))
	require.Error(t, err)
	require.Less(t, time.Since(start), 2*time.Second, "a refusal is not retried")
}

func msg(subj string) *nats.Msg { return &nats.Msg{Subject: subj, Data: []byte("hi")} }
