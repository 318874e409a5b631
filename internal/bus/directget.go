package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// directGetTimeout bounds one direct get request of ScanSubject.
var directGetTimeout = 5 * time.Second

// ScanSubject reads, oldest first, the messages of stream stored on
// subject since the given time, through the stream's direct get API
// ($JS.API.DIRECT.GET.<stream>): read-only, with no consumer to create or
// delete, so a least-privilege user needs only that subject. fn gets each
// message's data and returns false to stop. The stream must allow direct
// gets (every stream of the product does).
//
// Each request waits at most directGetTimeout even when ctx has no
// deadline: a request the server took and never answered (its responder
// died in a leader change) would otherwise block the caller for ever.
func ScanSubject(ctx context.Context, nc *nats.Conn, stream, subject string, since time.Time, fn func(data []byte) bool) error {
	api := "$JS.API.DIRECT.GET." + stream
	req := map[string]any{"next_by_subj": subject, "start_time": since.UTC()}
	for {
		body, _ := json.Marshal(req)
		rctx, cancel := context.WithTimeout(ctx, directGetTimeout)
		m, err := nc.RequestWithContext(rctx, api, body)
		cancel()
		if err != nil {
			return fmt.Errorf("direct get from %s: %w", stream, err)
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "404":
			return nil // no more messages
		default:
			return fmt.Errorf("direct get from %s: status %s %s", stream, status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return fmt.Errorf("direct get from %s: no sequence in the answer", stream)
		}
		if !fn(m.Data) {
			return nil
		}
		req = map[string]any{"next_by_subj": subject, "seq": seq + 1}
	}
}
