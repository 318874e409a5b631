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
// take, whatever the plans running are expected to write: it covers what
// other schedulers write between two reads of the bucket's size, and plans
// that write more than the plans before them.
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

// growthDefault is what a plan is expected to write, as a multiple of its
// record, before any plan here has finished; growthMin bounds what is
// learned from below (a plan writes its record twice: accepted, ended).
const (
	growthDefault = 4.0
	growthMin     = 2.0
)

// room tells intake whether the plans bucket has room for one more plan.
//
// A full bucket refuses the purge markers that would free it, and the
// scheduler has no grant to purge it any other way (docs/decisions/,
// "Purge only what is yours"): a bucket filled by plans stays full, each
// plan waiting for room only another's purge would free. So intake admits
// a plan only while the bucket's size, plus what each plan running here is
// expected to write, plus the new plan's share, stays under the bucket's
// limit less roomReserve. What a plan is expected to write is its record's
// size times its growth: what finished plans wrote over their records,
// learned, following larger plans at once and smaller ones slowly.
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
	held    int64 // what the plans running here are expected to write
	growth  float64
	readAt  time.Time
	reading bool
}

// newRoom starts from what the stream's info said when it was opened, as
// a size already old: the first plan reads it again.
func newRoom(stream jetstream.Stream) *room {
	r := &room{stream: stream, growth: growthDefault}
	if info := stream.CachedInfo(); info != nil {
		r.used, r.max = int64(info.State.Bytes), info.Config.MaxBytes
	}
	return r
}

// add counts n bytes sent to the bucket.
func (r *room) add(n int) { r.wrote.Add(int64(n)) }

// expect is what a plan whose record takes n bytes is expected to write.
func (r *room) expect(n int) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(float64(n) * r.growth)
}

// keep counts a plan that runs here without intake's admission (one
// recovered with its partition), expected to write exp bytes; the caller
// calls done when it stops.
func (r *room) keep(exp int64) {
	r.mu.Lock()
	r.held += exp
	r.mu.Unlock()
}

// done releases what hold counted for a plan whose record took n bytes.
// A plan that finished (ended says so) wrote wrote bytes in all, and the
// growth learns from it.
func (r *room) done(n int, exp int64, wrote int, ended bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held -= exp
	if !ended || n <= 0 {
		return
	}
	g := float64(wrote) / float64(n)
	if g > r.growth {
		r.growth += (g - r.growth) / 2
	} else {
		r.growth += (g - r.growth) / 16
	}
	r.growth = max(r.growth, growthMin)
}

// admit holds room for a plan expected to write exp bytes and reports nil,
// or reports an error naming the bucket and how full it is. The check and
// the hold are one step under the lock, so plans admitted at once by
// several partitions' intakes cannot together take more than there is;
// the caller releases the hold (done) when the plan stops, or at once when
// it does not start. A size older than roomEvery is read again: in the
// background (through start, which runs its function on a goroutine of the
// scheduler and reports false when the scheduler stops) while the plan
// fits, and before answering when it does not, so no plan is refused on a
// size older than roomRecheck; one older than roomAwait is read before
// anything.
func (r *room) admit(ctx context.Context, exp int64, start func(func(context.Context)) bool) error {
	if r.age() >= roomAwait {
		r.read(ctx)
	}
	used, max, age, ok := r.hold(exp)
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
		if used, max, _, ok = r.hold(exp); ok {
			return nil
		}
	}
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	return fmt.Errorf("the plans bucket %s has no room for new plans: %d of %d bytes used, the plans running here are expected to "+
		"write %d more and this one %d, and the last %.0f%% is kept free (a full bucket cannot free itself); new plans are "+
		"refused until finished plans free room", r.stream.CachedInfo().Config.Name, used, max, held, exp, roomReserve*100)
}

// hold adds exp to what the plans running here hold when it fits (ok), and
// returns the bucket's size as last read plus what was written since, its
// limit and the read's age.
func (r *room) hold(exp int64) (used, max int64, age time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	used, max, age = r.used+r.wrote.Load(), r.max, time.Since(r.readAt)
	if ok = max <= 0 || used+r.held+exp <= r.limit(max); ok {
		r.held += exp
	}
	return used, max, age, ok
}

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
