package skillworker

import (
	"bytes"
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/internal/tracing"
)

// directWait bounds how long a worker waits for the scheduler to take an
// outcome sent as a request before it stores the outcome on the stream.
// The scheduler answers once the tool's record is stored, which takes a
// round trip to the store, so a wait this long means the scheduler or its
// store is in trouble; the stream is then the safe way.
const directWait = 2 * time.Second

// sendDirect sends an encoded outcome to the scheduler that dispatched the
// job (its outcomeTo) and reports whether it took it: answered "+", which
// it does once the outcome's effects are stored. Then the outcome need not
// be stored on the outcomes stream. Without outcomeTo, or with any other
// answer or none, it reports false.
func (w *Worker) sendDirect(tctx context.Context, to string, data []byte) bool {
	if to == "" {
		return false
	}
	m := &nats.Msg{Subject: to, Data: data}
	tracing.Inject(tctx, m)
	resp, err := w.nc.RequestMsg(m, directWait)
	taken := err == nil && bytes.Equal(resp.Data, []byte("+"))
	w.m.direct.WithLabelValues(directResult(taken, err)).Inc()
	return taken
}

func directResult(taken bool, err error) string {
	switch {
	case taken:
		return "taken"
	case err == nil:
		return "declined"
	default:
		return "unanswered"
	}
}
