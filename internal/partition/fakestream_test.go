package partition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fakeStream is a sink standing for one JetStream stream that goes wrong
// on purpose: from a seed it decides, call by call, what fails — the
// stream busy, a write lost on the way (no answer), a write stored whose
// answer is lost, the store full, atomic batches refused, a newer fence
// raised before the call. It keeps what the stream stores, and a
// transcript of every call and its outcome.
//
// It waits with the time package (a call takes fakeLatency; an answer
// that never comes waits for the caller's context), so it is meant to run
// in a testing/synctest bubble: the bubble's clock makes every run of a
// seed the same, and no test sleeps for real.
type fakeStream struct {
	mu         sync.Mutex
	rng        *rand.Rand
	replicated bool // only a replicated stream refuses a write as busy
	atomic     bool // the stream allows atomic batches
	start      time.Time
	log        strings.Builder
	stored     []storedMsg       // stored[seq-1]
	last       map[string]uint64 // each subject's last sequence
	faults     map[fault]int     // how many of each fault were dealt
}

// storedMsg is one message the fake stream stored.
type storedMsg struct{ subject, data string }

// fault is what goes wrong with one call.
type fault int

const (
	faultNone     fault = iota
	faultBusy           // refused: the leader is still busy with the previous write (Busy)
	faultLost           // lost on the way, across a reconnect: not stored, no answer
	faultUnacked        // stored, but the answer is lost
	faultFull           // refused: the stream is full (client.Refused)
	faultDisabled       // an atomic batch refused: atomic publish disabled
	faultFence          // a newer fence was raised just before the call
)

func (f fault) String() string {
	return [...]string{"ok", "busy", "lost", "unacked", "full", "batch disabled", "fence raised"}[f]
}

// fakeLatency is how long a call to the fake stream takes.
const fakeLatency = time.Millisecond

// fakeFenceSubject is the fence subject of the fake stream; its first
// marker is at sequence 1.
const fakeFenceSubject = "w.fence"

// newFakeStream returns a fake stream dealing faults from seed; it must be
// made inside the bubble it is used in.
func newFakeStream(seed uint64, replicated, atomic bool) *fakeStream {
	f := &fakeStream{
		rng:        rand.New(rand.NewPCG(seed, 0x5eed)),
		replicated: replicated,
		atomic:     atomic,
		start:      time.Now(),
		last:       map[string]uint64{},
		faults:     map[fault]int{},
	}
	f.storeLocked(&nats.Msg{Subject: fakeFenceSubject, Data: []byte("me")})
	return f
}

// fence is the fence the writes to the fake stream are stamped with.
func (f *fakeStream) fence() Fence { return Fence{Stream: "W", Subject: fakeFenceSubject, Seq: 1} }

// note adds a line to the transcript.
func (f *fakeStream) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noteLocked(format, args...)
}

func (f *fakeStream) noteLocked(format string, args ...any) {
	fmt.Fprintf(&f.log, "%8.3fs ", time.Since(f.start).Seconds())
	fmt.Fprintf(&f.log, format, args...)
	f.log.WriteByte('\n')
}

// transcript returns every line noted so far.
func (f *fakeStream) transcript() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.String()
}

// snapshot returns what the stream stores, in order.
func (f *fakeStream) snapshot() []storedMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]storedMsg(nil), f.stored...)
}

// deal draws the fault of the next call. The thresholds are per mille.
func (f *fakeStream) deal(batch bool) fault {
	if f.rng.IntN(1000) < 6 {
		return faultFence
	}
	r := f.rng.IntN(1000)
	switch {
	case batch && (!f.atomic || r < 50):
		return faultDisabled
	case f.replicated && r < 200:
		return faultBusy
	case r < 250:
		return faultLost
	case r < 280:
		return faultUnacked
	case r < 320:
		return faultFull
	}
	return faultNone
}

// answer is the fake stream's answer to one call: an acknowledgement, an
// error, or none at all (neither).
type answer struct {
	ack *jetstream.PubAck
	err error
}

// take runs one call over msgs (one, or a batch) and returns the stream's
// answer; silent says no answer comes. It notes the call as name.
func (f *fakeStream) take(name string, msgs []*nats.Msg, batch bool) (a answer, silent bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.deal(batch)
	f.faults[fl]++
	if fl == faultFence {
		seq := f.storeLocked(&nats.Msg{Subject: fakeFenceSubject, Data: []byte("successor")})
		f.noteLocked("a newer fence is raised: %s at %d", fakeFenceSubject, seq)
		fl = faultNone
	}
	var what string
	switch {
	case fl == faultLost:
		silent, what = true, "lost, no answer"
	case fl == faultDisabled:
		a.err = &jetstream.APIError{Code: 400, ErrorCode: errCodeAtomicDisabled, Description: "atomic publish is disabled"}
	case f.fencedOutLocked(msgs) != nil:
		a.err = f.fencedOutLocked(msgs)
	case fl == faultBusy:
		a.err = &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	case fl == faultFull:
		a.err = &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum bytes exceeded"}
	default:
		var seq uint64
		for _, m := range msgs {
			seq = f.storeLocked(m)
		}
		a.ack = &jetstream.PubAck{Stream: "W", Sequence: seq}
		what = fmt.Sprintf("stored at %d", seq)
		if fl == faultUnacked {
			silent, what = true, what+", answer lost"
		}
	}
	if a.err != nil {
		what = "refused: " + a.err.Error()
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.Subject + "=" + string(m.Data)
	}
	f.noteLocked("%s %s -> %s", name, strings.Join(ids, " "), what)
	return a, silent
}

// fencedOutLocked returns the error of a stream refusing msgs because one
// expects a last sequence on a subject that the subject does not have.
func (f *fakeStream) fencedOutLocked(msgs []*nats.Msg) error {
	for _, m := range msgs {
		subj := m.Header.Get(jetstream.ExpectedLastSubjSeqSubjHeader)
		if subj == "" {
			continue
		}
		want, _ := strconv.ParseUint(m.Header.Get(jetstream.ExpectedLastSubjSeqHeader), 10, 64)
		if last := f.last[subj]; last != want {
			return &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence,
				Description: fmt.Sprintf("wrong last sequence: %d", last)}
		}
	}
	return nil
}

func (f *fakeStream) storeLocked(m *nats.Msg) uint64 {
	f.stored = append(f.stored, storedMsg{subject: m.Subject, data: string(m.Data)})
	seq := uint64(len(f.stored))
	f.last[m.Subject] = seq
	return seq
}

func (f *fakeStream) publish(ctx context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	time.Sleep(fakeLatency)
	a, silent := f.take("publish", []*nats.Msg{m}, false)
	if silent {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return a.ack, a.err
}

func (f *fakeStream) publishAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	a, silent := f.take("publish async", []*nats.Msg{m}, false)
	fut := &fakeFuture{msg: m, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	if !silent {
		// The answer comes back a moment later (once the bubble's clock
		// moves, so never while the caller is still publishing).
		time.AfterFunc(fakeLatency, func() {
			if a.err != nil {
				fut.err <- a.err
				return
			}
			fut.ok <- a.ack
		})
	}
	return fut, nil
}

func (f *fakeStream) publishBatch(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	time.Sleep(fakeLatency)
	a, silent := f.take("batch", msgs, true)
	if silent {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return a.ack, a.err
}

// fakeFuture is the future of an asynchronous publish to a fakeStream.
type fakeFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *fakeFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *fakeFuture) Err() <-chan error            { return f.err }
func (f *fakeFuture) Msg() *nats.Msg               { return f.msg }
