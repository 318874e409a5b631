package bus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The key-value format, written out once: a bucket B is the stream KV_B,
// its key K the subject $KV.B.K, and a delete or purge is a message on
// that subject with a KV-Operation header (DEL or PURGE), a purge rolling
// the subject up. The components that write a bucket's stream directly
// (through the partition writer's fences, or a fenced direct get) build
// and read its messages with these.

// KVStream is the stream of bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubject is the subject of bucket's key.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// KVPurgeMsg is the purge marker of bucket's key: it removes the key's
// earlier messages (a roll-up of its subject), and with ttl > 0 goes itself
// after ttl (the bucket's stream must allow per-message TTLs).
func KVPurgeMsg(bucket, key string, ttl time.Duration) *nats.Msg {
	m := nats.NewMsg(KVSubject(bucket, key))
	m.Header.Set(kvOperation, "PURGE")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if ttl > 0 {
		m.Header.Set("Nats-TTL", ttl.String())
	}
	return m
}

// KVDeleted reports whether a message of a bucket's stream is a delete or
// purge marker (its key has no value).
func KVDeleted(h nats.Header) bool { return h.Get(kvOperation) != "" }

const kvOperation = "KV-Operation"

// LastSeq reads, by direct get ($JS.API.DIRECT.GET.<stream>.<subject>), the
// sequence of the last message of stream on subject, deletes and purge
// markers included: 0 when there is none. It needs only that API subject,
// and waits at most directGetTimeout.
func LastSeq(ctx context.Context, nc *nats.Conn, stream, subject string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, directGetTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return 0, fmt.Errorf("direct get of %s from %s: %w", subject, stream, err)
	}
	switch status := m.Header.Get("Status"); status {
	case "":
		return strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	case "404":
		return 0, nil
	default:
		return 0, fmt.Errorf("direct get of %s from %s: status %s %s", subject, stream, status, m.Header.Get("Description"))
	}
}
