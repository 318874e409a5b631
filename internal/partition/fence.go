package partition

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/client"
)

// Fence is a fencing token: the stream sequence of the marker an owner
// wrote on a fence subject when it took its partition. Every write the
// owner makes to that stream afterwards is stamped with it
// (Nats-Expected-Last-Subject-Sequence on the fence subject), so the
// server refuses it once another owner has raised a newer fence — a
// paused owner that wakes up late cannot change what its successor owns,
// however its clock or lease look.
type Fence struct {
	// Stream is the stream the fence guards.
	Stream string
	// Subject is the fence subject (in Stream).
	Subject string
	// Seq is the marker's stream sequence.
	Seq uint64
}

// Raise writes a new marker on subject and returns the fence it makes.
// Every earlier fence of that subject stops working at once.
//
// A full stream (its byte or message limit reached, discard-new) refuses
// a new message, and a partition must move while its stores are full
// (docs/decisions/, "A fence that full stores cannot refuse"). Markers
// all have one size, so Raise then purges the subject's old marker first:
// that frees exactly the room the new one takes. Between the purge and the
// new marker no fence of the subject holds (a purged subject's last
// sequence is 0, which no fence carries), so no owner's write is stored
// meanwhile.
func Raise(ctx context.Context, js jetstream.JetStream, subject, owner string) (Fence, error) {
	marker := []byte(fmt.Sprintf("%-*.*s", markerSize, markerSize, owner))
	ack, err := js.Publish(ctx, subject, marker)
	if client.Refused(err) {
		stream, serr := js.StreamNameBySubject(ctx, subject)
		if serr != nil {
			return Fence{}, fmt.Errorf("raise fence %s: %w (and find its stream to make room: %v)", subject, err, serr)
		}
		st, serr := js.Stream(ctx, stream)
		if serr == nil {
			serr = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
		}
		if serr != nil {
			return Fence{}, fmt.Errorf("raise fence %s: %w (and purge the old marker to make room: %v)", subject, err, serr)
		}
		ack, err = js.Publish(ctx, subject, marker)
	}
	if err != nil {
		return Fence{}, fmt.Errorf("raise fence %s: %w", subject, err)
	}
	return Fence{Stream: ack.Stream, Subject: subject, Seq: ack.Sequence}, nil
}

// markerSize is the size of every fence marker's payload (the owner's ID,
// padded or cut), so replacing a marker never needs more room than the
// old one held.
const markerSize = 64

// Stamp makes m conditional on the fence: the stream stores it only while
// the fence is the newest on its subject. m must not carry another
// expected-sequence header (one message checks one subject).
func (f Fence) Stamp(m *nats.Msg) {
	if f.Subject == "" {
		return
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(f.Seq, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, f.Subject)
}

// Refused reports whether a stamped write was refused because a newer
// fence was raised: the writer no longer owns the partition.
func Refused(err error) bool { return err != nil && bus.IsConflict(err) }

// RaiseAll raises a fence on each subject, in order, trying again with
// backoff until it succeeds or ctx ends (a new owner must fence its
// partition before it acts on it).
func RaiseAll(ctx context.Context, js jetstream.JetStream, owner string, log *slog.Logger, subjects ...string) ([]Fence, error) {
	out := make([]Fence, 0, len(subjects))
	for attempt := 0; len(out) < len(subjects); attempt++ {
		f, err := Raise(ctx, js, subjects[len(out)], owner)
		if err == nil {
			out = append(out, f)
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Warn("partition: cannot raise a fence; retrying", slog.String("subject", subjects[len(out)]), slog.Any("error", err))
		bus.Sleep(ctx, min(time.Duration(attempt+1)*100*time.Millisecond, time.Second))
	}
	return out, nil
}
