package client

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishRetryDefault bounds how long PublishRetry tries by default.
const PublishRetryDefault = 30 * time.Second

// Transient reports whether a JetStream publish may succeed if sent again:
// no stream leader (503), no answer, a timeout. A refusal (permissions,
// a stream limit, a wrong expected sequence) is not.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// PublishRetry publishes a message (with its headers) to JetStream and waits for its ack,
// sending it again with backoff (100 ms doubling to 2 s) through a stream
// leader election or a server restart, for up to retryFor or until ctx
// ends. Every publish on the hot path carries a message ID, so a message
// stored twice is deduplicated by the stream.
func PublishRetry(ctx context.Context, js jetstream.JetStream, m *nats.Msg, retryFor time.Duration,
	opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	deadline := time.Now().Add(retryFor)
	wait := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := js.PublishMsg(pctx, m, opts...)
		cancel()
		if err == nil || !Transient(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return ack, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
