package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
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
	require.Less(t, time.Since(start), testlog.Budget(2*time.Second), "a refusal is not retried")
}

func msg(subj string) *nats.Msg { return &nats.Msg{Subject: subj, Data: []byte("hi")} }

// TestRefused: a stream at its byte limit with discard-new, a message over
// a stream's maximum size, a KV bucket at its limit, and a message over the
// server's maximum payload are refusals, not transient failures: the
// server's 503 for a full stream is not a leader election.
func TestRefused(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	_, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, MaxBytes: 4 << 10,
		Discard: jetstream.DiscardNew, MaxMsgSize: 2 << 10})
	require.NoError(t, err)
	big := make([]byte, 1500)
	var full error
	for i := 0; i < 10 && full == nil; i++ {
		_, full = srv.JS.Publish(ctx, "full.x", big)
	}
	require.Error(t, full, "the stream fills")
	require.Contains(t, full.Error(), "maximum bytes exceeded")
	require.True(t, client.Refused(full), "%v", full)
	require.False(t, client.Transient(full), "%v", full)

	_, err = srv.JS.Publish(ctx, "full.y", make([]byte, 3<<10))
	require.Error(t, err)
	require.True(t, client.Refused(err), "over the stream's maximum message size: %v", err)

	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fullkv", MaxBytes: 4 << 10})
	require.NoError(t, err)
	var kvErr error
	for i := 0; i < 10 && kvErr == nil; i++ {
		_, kvErr = kv.Put(ctx, "k"+string(rune('a'+i)), big)
	}
	require.Error(t, kvErr, "the bucket fills")
	require.True(t, client.Refused(kvErr), "%v", kvErr)

	start := time.Now()
	_, err = client.PublishRetry(ctx, srv.JS, &nats.Msg{Subject: "full.z", Data: big}, time.Minute)
	require.True(t, client.Refused(err), "%v", err)
	require.Less(t, time.Since(start), testlog.Budget(5*time.Second), "a refusal is not retried for a minute")

	_, err = srv.JS.Publish(ctx, "full.w", make([]byte, 2<<20))
	require.True(t, client.Refused(err), "over the maximum payload: %v", err)

	require.False(t, client.Transient(nil) || client.Refused(nil))
	require.True(t, client.Transient(&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}))
}

// TestRefusedReadsTheServersOwnErrors: nats-server answers every store
// failure with the one error code 10077, its description the store's error
// — a limit (refused for good) or a store closing under a restart (worth
// sending again). Refused tells them apart by the server's own error
// values, so a server whose words change fails here, not in production.
func TestRefusedReadsTheServersOwnErrors(t *testing.T) {
	wire := func(e *server.ApiError) error {
		return fmt.Errorf("publish: %w", &jetstream.APIError{Code: e.Code, ErrorCode: jetstream.ErrorCode(e.ErrCode), Description: e.Description})
	}
	for _, limit := range []error{server.ErrMaxBytes, server.ErrMaxMsgs, server.ErrMaxMsgsPerSubject} {
		err := wire(server.NewJSStreamStoreFailedError(limit, server.Unless(limit)))
		require.True(t, client.Refused(err), "%v", err)
		require.False(t, client.Transient(err), "%v", err)
	}
	for _, passing := range []error{server.ErrStoreClosed, server.ErrStoreEOF} {
		err := wire(server.NewJSStreamStoreFailedError(passing, server.Unless(passing)))
		require.False(t, client.Refused(err), "a store failure that is no limit: %v", err)
	}
	require.True(t, client.Refused(wire(server.NewJSStreamMessageExceedsMaximumError())))
	require.True(t, client.Refused(wire(server.NewJSInsufficientResourcesError())))
}

// TestPromptLimitsAtTheDoor: a prompt the narrator would refuse (text over
// 4,000 characters, empty, a bad session) is refused by Submit and Narrate
// with the narrator's own words, before anything is sent.
func TestPromptLimitsAtTheDoor(t *testing.T) {
	srv := natstest.Start(t)
	c, err := client.New(srv.NC)
	require.NoError(t, err)
	for text, want := range map[string]string{
		strings.Repeat("é", 4001): "is 4001 characters; the limit is 4000",
		"   ":                     "text: must not be empty",
	} {
		_, err := c.Submit(t.Context(), messages.Prompt{SessionID: "s1", Text: text})
		require.ErrorContains(t, err, want)
		_, err = c.Narrate(t.Context(), messages.Prompt{SessionID: "s1", Text: text})
		require.ErrorContains(t, err, want)
	}
	_, err = c.Submit(t.Context(), messages.Prompt{SessionID: "s.1", Text: "hi"})
	require.ErrorContains(t, err, "sessionId")
	st, err := srv.JS.Stream(t.Context(), messages.StreamPrompts)
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing stored")
	// The largest prompt the narrator takes passes the client's checks
	// and is sent (no narrator runs here to store it: the client sends it
	// again until its context ends).
	sctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = c.Submit(sctx, messages.Prompt{SessionID: "s1", Text: strings.Repeat("é", 4000)})
	require.ErrorIs(t, err, context.DeadlineExceeded, "the largest prompt the narrator takes is sent")
}
