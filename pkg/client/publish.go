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
// a stream limit, a wrong expected sequence; see Refused) is not.
func Transient(err error) bool {
	if Refused(err) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// Refused reports whether the server refused a message for a reason that
// sending it again does not change: the stream or bucket is at its byte or
// message limit with discard-new, the message is over the stream's maximum
// size or the connection's maximum payload, or the server has no room
// (insufficient resources). The server answers the first with 503, which a
// reader of codes alone takes for a leader election.
//
// The one place this package reads an error's text: nats-server answers
// every store failure with the code 10077, whether a limit refused the
// message or the store was closing under a restart, and its description —
// the store's own error — is the only word of which. storeLimits are
// nats-server's ErrMaxBytes, ErrMaxMsgs and ErrMaxMsgsPerSubject
// (TestRefusedReadsTheServersOwnErrors holds them to the server's values).
func Refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamMessageExceedsMaximum, errCodeInsufficientResources:
		return true
	case errCodeStoreFailed:
		_, limit := storeLimits[apiErr.Description]
		return limit
	}
	return false
}

// storeLimits are the descriptions of a store failure that is a limit.
var storeLimits = map[string]struct{}{
	"maximum bytes exceeded":                {},
	"maximum messages exceeded":             {},
	"maximum messages per subject exceeded": {},
}

// JetStream error codes nats.go has no name for (nats-server's
// jetstream_errors_generated.go).
const (
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeStoreFailed           jetstream.ErrorCode = 10077
)

// PublishRetry publishes a message (with its headers) to JetStream and waits for its ack,
// sending it again with backoff (100 ms doubling to 1 s) through a stream
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
		wait = min(2*wait, time.Second)
	}
}
