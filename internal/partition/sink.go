package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// sink is the stream a Writer sends to: the three ways it publishes. The
// Writer's own waits (timeouts, backoff) use the time package, so a test
// that runs a Writer over a fake sink in a testing/synctest bubble drives
// them with the bubble's clock.
type sink interface {
	// publish sends m and waits for the stream's acknowledgement.
	publish(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
	// publishAsync sends m without waiting; the future settles with the
	// stream's answer. An error says the client could not take m now.
	publishAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
	// publishBatch stores msgs as one atomic batch, all or none, and
	// returns the acknowledgement of the last.
	publishBatch(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error)
}

// streamSink is the sink of a JetStream stream.
type streamSink struct{ js jetstream.JetStream }

func (s streamSink) publish(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return s.js.PublishMsg(ctx, m, opts...)
}

func (s streamSink) publishAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return s.js.PublishMsgAsync(m, opts...)
}

func (s streamSink) publishBatch(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	return atomicBatch(ctx, s.js.Conn(), msgs)
}

// errCodeAtomicDisabled is the server's error code for an atomic batch
// sent to a stream that does not allow atomic publish.
const errCodeAtomicDisabled jetstream.ErrorCode = 10174

// atomicBatch publishes msgs as one atomic batch (ADR-50): every message
// but the last is published with the batch's ID and its sequence in it,
// and the last commits the batch and carries the server's answer.
func atomicBatch(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	id := nuid.Next()
	for i, msg := range msgs {
		m := &nats.Msg{Subject: msg.Subject, Data: msg.Data, Header: nats.Header{}}
		for k, v := range msg.Header {
			m.Header[k] = v
		}
		m.Header.Set(batchIDHeader, id)
		m.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return nil, err
			}
			continue
		}
		m.Header.Set(batchCommitHeader, "1")
		resp, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return nil, jetstream.ErrNoStreamResponse
			}
			return nil, err
		}
		var r struct {
			Error *jetstream.APIError `json:"error,omitempty"`
			jetstream.PubAck
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil {
			return nil, fmt.Errorf("decode the answer to an atomic batch: %w", err)
		}
		if r.Error != nil {
			return nil, r.Error
		}
		if r.Stream == "" {
			return nil, jetstream.ErrInvalidJSAck
		}
		return &r.PubAck, nil
	}
	return nil, errors.New("partition: empty batch")
}

// The headers of an atomic batch (ADR-50).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)
