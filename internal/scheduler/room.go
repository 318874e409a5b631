package scheduler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// roomReserve is the share of the plans bucket that new plans may not
// take: it is left to the plans running, whose tool logs and records grow
// as their tools end.
const roomReserve = 0.2

// roomEvery is how old the bucket's size may be before intake reads it
// again, in the background, while plans fit; roomAwait is how old it may
// be before intake waits for the read (the first plan after a quiet
// while: the bucket may have been resized, or filled by others).
// A plan that does not fit reads it first unless it is younger than
// roomRecheck (a flood of plans into a full bucket asks once per
// roomRecheck, not once per plan).
const (
	roomEvery   = 250 * time.Millisecond
	roomAwait   = 2 * time.Second
	roomRecheck = 50 * time.Millisecond
)

// room tells intake whether the plans bucket has room for one more plan.
//
// A full bucket does not deadlock: a plan whose state write it refuses
// ends (storage_refused) and a finished plan's keys are purged even when
// the bucket refuses the purge markers (store.purge), so the plans in a
// full bucket free it as they end (docs/decisions/, "A full plans bucket
// frees itself"). The gate only keeps new plans from starting in a bucket
// so full that the plans already running would meet a refusal: intake
// admits a plan while the bucket's size, plus the plan's record, stays
// under the bucket's limit less roomReserve. It predicts nothing: what a
// plan will write is not guessed (an earlier gate learned it from finished
// plans, and a few plans with large outputs made it refuse ordinary plans
// in a nearly empty bucket).
//
// The size is read at most every roomEvery in the background; intake waits
// for a read only before refusing a plan, or when the last read is older
// than roomAwait. What this scheduler wrote since the read began is added,
// so a burst between two reads is counted.
type room struct {
	stream jetstream.Stream
	// wrote counts the bytes this scheduler sent to the bucket since the
	// last read began.
	wrote atomic.Int64

	mu      sync.Mutex
	used    int64 // the bucket's size at the last read
	max     int64 // its MaxBytes then (≤ 0: no limit)
	readAt  time.Time
	reading bool
}

// newRoom starts from what the stream's info said when it was opened, as
// a size already old: the first plan reads it again.
func newRoom(stream jetstream.Stream) *room {
	r := &room{stream: stream}
	if info := stream.CachedInfo(); info != nil {
		r.used, r.max = int64(info.State.Bytes), info.Config.MaxBytes
	}
	return r
}

// add counts n bytes sent to the bucket.
func (r *room) add(n int) { r.wrote.Add(int64(n)) }

// admit reports nil when a plan whose record takes n bytes may start, or
// an error naming the bucket and how full it is. A size older than
// roomEvery is read again: in the background (through start, which runs
// its function on a goroutine of the scheduler and reports false when the
// scheduler stops) while the plan fits, and before answering when it does
// not, so no plan is refused on a size older than roomRecheck; one older
// than roomAwait is read before anything.
func (r *room) admit(ctx context.Context, n int, start func(func(context.Context)) bool) error {
	if r.age() >= roomAwait {
		r.read(ctx)
	}
	used, max, age, ok := r.fits(n)
	switch {
	case ok && age >= roomEvery:
		r.mu.Lock()
		if !r.reading {
			r.reading = start(r.read)
		}
		r.mu.Unlock()
		return nil
	case ok:
		return nil
	case age >= roomRecheck:
		r.read(ctx)
		if used, max, _, ok = r.fits(n); ok {
			return nil
		}
	}
	return fmt.Errorf("the plans bucket %s has no room for new plans: %d of %d bytes used, and the last %.0f%% is left to the "+
		"plans running; new plans are refused until finished plans free room", r.stream.CachedInfo().Config.Name, used, max, roomReserve*100)
}

// fits reports whether n more bytes keep the bucket under its limit less
// the reserve (ok), with the bucket's size as last read plus what was
// written since, its limit and the read's age.
func (r *room) fits(n int) (used, max int64, age time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	used, max, age = r.used+r.wrote.Load(), r.max, time.Since(r.readAt)
	return used, max, age, max <= 0 || used+int64(n) <= r.limit(max)
}

// markersFit reports whether the bucket is under markersShare of its
// limit (by its size as last read plus what was written since): while it
// is, finished plans' keys are purged with markers; past it, by request
// (store.purge).
func (r *room) markersFit() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max <= 0 || float64(r.used+r.wrote.Load()) < markersShare*float64(r.max)
}

// markersShare is the share of the plans bucket that finished plans' purge
// markers may fill: past it, keys are purged by request, which stores
// nothing. Markers stay a minute (purgeMarkerTTL), so a steady flow of
// plans keeps a minute's worth of them in the bucket: about 800 KiB at 40
// plans a second, most of a 1 MiB bucket, which new plans then wait behind.
const markersShare = 0.5

// age is how old the last read of the bucket's size is.
func (r *room) age() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.readAt)
}

// limit is what new plans may fill of a bucket of max bytes.
func (r *room) limit(max int64) int64 { return int64(float64(max) * (1 - roomReserve)) }

// read reads the bucket's size. The bytes written while it is under way
// stay counted (they may or may not be in what it reads).
func (r *room) read(ctx context.Context) {
	before := r.wrote.Load()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	info, err := r.stream.Info(rctx)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reading, r.readAt = false, time.Now()
	if err != nil {
		return // the last size stands; the next intake asks again
	}
	r.used, r.max = int64(info.State.Bytes), info.Config.MaxBytes
	r.wrote.Add(-before)
}
