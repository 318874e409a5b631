// Package election elects one leader among candidates through a lease on
// a JetStream KV key.
//
// Safety: at most one candidate acts as leader at a time, provided clocks
// advance at similar rates. A holder renews the lease every TTL/3 (every
// 2 s at most) with a
// compare-and-set on the key's revision and steps down (its leader context
// is cancelled) when a renewal meets a conflict, and whenever TTL/2 has
// passed since its last successful renewal (a process paused past that
// wakes up, finds it late, and stops before acting). A renewal the store
// does not answer (a timeout, no responders while the bucket's stream
// elects a leader, a reconnect) is retried until then: the deadline, not
// the failure, is what keeps two leaders apart, so riding through a short
// election costs no safety. A challenger takes over only after it has seen the key
// unchanged for a full TTL on its own clock, so it never relies on another
// machine's clock. Writes a leader makes should still be fenced with the
// Term's revision where a late write would do harm (scale-out fences every
// write; a single active scheduler tolerates the rest: its writes are
// idempotent records of what it saw).
//
// Liveness: after the holder dies, a challenger takes over within
// TTL + TTL/6 (one check interval); after a graceful stop (the holder
// marks the lease released, naming itself) at the next check, TTL/6.
package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
)

// TTLDefault is the lease's time to live.
const TTLDefault = 3 * time.Second

// ErrConfig is matched by configuration errors.
var ErrConfig = errors.New("election: bad configuration")

// Config configures a candidate.
type Config struct {
	// ID identifies the candidate; a candidate that restarts with the same
	// ID takes its own lease back at once. Required.
	ID string
	// Key is the lease's key. Required.
	Key string
	// TTL is how long a lease lives without renewal. Default 3s; at least
	// 300ms.
	TTL time.Duration
	// Logger receives the election's logs. Default: discard.
	Logger *slog.Logger
	// Seen, when set, tells a new campaign the key's revision and when
	// this process saw it change, so a lease that has been silent for a
	// while is not waited out again from the start (a partition manager
	// watches all its leases). Default: the campaign starts watching.
	Seen func() (rev uint64, at time.Time)
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.TTL == 0 {
		c.TTL = TTLDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: ID is required", ErrConfig)
	case c.Key == "":
		return fmt.Errorf("%w: Key is required", ErrConfig)
	case c.TTL < 300*time.Millisecond:
		return fmt.Errorf("%w: TTL must be at least 300ms, got %s", ErrConfig, c.TTL)
	}
	return nil
}

// Term is one tenure of a leader.
type Term struct {
	// Revision is the key's revision when the lease was won: a fencing
	// token, higher for every later term.
	Revision uint64
	// Previous is the ID of the holder before this term ("" when the
	// lease was free: never held, released, or held by this candidate).
	Previous string
	// renewed is when the lease was last renewed (or won), read on the
	// monotonic clock; nil in a Term made by hand.
	renewed *atomic.Int64
	ttl     time.Duration
	epoch   time.Time
}

// Held reports whether the term is still certainly this candidate's: its
// last renewal is younger than TTL/2 on this process's monotonic clock. A
// process paused past that (SIGSTOP, a long GC, a frozen VM) finds it
// false the moment it runs again, before its leader context is cancelled,
// so callers check it right before an action another owner must never see
// twice. A Term made by hand is always held.
func (t Term) Held() bool {
	if t.renewed == nil {
		return true
	}
	return time.Since(t.epoch)-time.Duration(t.renewed.Load()) < t.ttl/2
}

// lease is the key's value.
type lease struct {
	ID      string    `json:"id"`
	Renewed time.Time `json:"renewed"`
	// Released marks a lease its holder gave up on a graceful stop: free
	// to take at once, and it still names who held it.
	Released bool `json:"released,omitempty"`
}

// Election is one candidate. Create it with New, then Run it.
type Election struct {
	kv      jetstream.KeyValue
	cfg     Config
	log     *slog.Logger
	leading atomic.Bool

	// pause, when set (tests), is called before each renewal; it lets a
	// test stall the renewer as a paused process would be.
	pause func()
	// failed, when set (tests), is called for each renewal the store did
	// not answer.
	failed func()
}

// New builds a candidate on a KV bucket.
func New(kv jetstream.KeyValue, cfg Config) (*Election, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Election{kv: kv, cfg: cfg, log: cfg.Logger.With(slog.String("candidate", cfg.ID))}, nil
}

// Leading reports whether this candidate leads now.
func (e *Election) Leading() bool { return e.leading.Load() }

// Run campaigns until ctx ends. Each time this candidate wins, lead runs
// with a context that is cancelled as soon as leadership is in doubt; lead
// must return promptly then. When ctx ends while leading, the lease is
// released (after lead returned) so another candidate takes over at once.
// Run returns when ctx has ended and lead has returned.
func (e *Election) Run(ctx context.Context, lead func(context.Context, Term)) {
	tick := e.cfg.TTL / 6
	var lastRev uint64
	lastChange := time.Now()
	if e.cfg.Seen != nil {
		if rev, at := e.cfg.Seen(); rev != 0 {
			lastRev, lastChange = rev, at
		}
	}
	for ctx.Err() == nil {
		rev, prev, err := e.tryAcquire(ctx, &lastRev, &lastChange)
		if err != nil && ctx.Err() == nil && !bus.IsConflict(err) {
			e.log.Debug("election: lease check", slog.Any("error", err))
		}
		if rev != 0 {
			e.hold(ctx, Term{Revision: rev, Previous: prev}, lead)
			lastRev, lastChange = 0, time.Now()
			continue
		}
		t := time.NewTimer(tick)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func (e *Election) value() []byte {
	b, _ := json.Marshal(lease{ID: e.cfg.ID, Renewed: time.Now().UTC()})
	return b
}

// tryAcquire takes the lease when it is free, ours, or unchanged for a
// TTL as seen from here; it returns the lease's revision (0 if not won)
// and the previous holder's ID ("" when it was free or ours).
func (e *Election) tryAcquire(ctx context.Context, lastRev *uint64, lastChange *time.Time) (uint64, string, error) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	defer cancel()
	entry, err := e.kv.Get(cctx, e.cfg.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		rev, err := e.kv.Create(cctx, e.cfg.Key, e.value())
		return rev, "", err
	}
	if err != nil {
		return 0, "", err
	}
	if entry.Operation() != jetstream.KeyValuePut { // deleted or purged: free
		rev, err := e.kv.Update(cctx, e.cfg.Key, e.value(), entry.Revision())
		return rev, "", err
	}
	var l lease
	_ = json.Unmarshal(entry.Value(), &l)
	if l.Released {
		prev := l.ID
		if prev == e.cfg.ID {
			prev = ""
		}
		rev, err := e.kv.Update(cctx, e.cfg.Key, e.value(), entry.Revision())
		return rev, prev, err
	}
	if l.ID == e.cfg.ID {
		// Our own: from before a restart, or a term this candidate stepped
		// down from (a renewal not confirmed in time). No one else took
		// it — the key still names us — so it is taken back at once
		// rather than waited out as if another candidate held it.
		*lastRev, *lastChange = entry.Revision(), time.Now()
		rev, err := e.kv.Update(cctx, e.cfg.Key, e.value(), entry.Revision())
		return rev, "", err
	}
	if entry.Revision() != *lastRev {
		*lastRev, *lastChange = entry.Revision(), time.Now()
		return 0, "", nil
	}
	if time.Since(*lastChange) < e.cfg.TTL {
		return 0, "", nil
	}
	e.log.Warn("election: the leader's lease lapsed; taking over", slog.String("from", l.ID))
	rev, err := e.kv.Update(cctx, e.cfg.Key, e.value(), entry.Revision())
	return rev, l.ID, err
}

// hold runs lead while renewing the lease; any doubt ends leadership.
func (e *Election) hold(ctx context.Context, term Term, lead func(context.Context, Term)) {
	lctx, stepDown := context.WithCancel(ctx)
	defer stepDown()
	rev := term.Revision
	term.renewed, term.ttl, term.epoch = new(atomic.Int64), e.cfg.TTL, time.Now()
	e.leading.Store(true)
	e.log.Debug("election: leading", slog.Uint64("revision", rev))
	var wg sync.WaitGroup
	wg.Add(1)
	last := rev
	go func() {
		defer wg.Done()
		defer stepDown()
		last = e.renew(lctx, term, stepDown)
	}()
	lead(lctx, term)
	stepDown()
	wg.Wait()
	e.leading.Store(false)
	if ctx.Err() != nil { // graceful stop: hand over at once
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		b, _ := json.Marshal(lease{ID: e.cfg.ID, Renewed: time.Now().UTC(), Released: true})
		_, _ = e.kv.Update(dctx, e.cfg.Key, b, last)
		cancel()
	}
	e.log.Debug("election: no longer leading")
}

// renewMax bounds the renewal interval of long leases.
const renewMax = 2 * time.Second

// renewEvery is the renewal interval of a lease of ttl: TTL/3, and at
// most renewMax. A holder rides through a store outage (a replicated
// bucket's stream electing a leader) that ends within TTL/2 of its last
// renewal, so the shorter the interval, the longer the outage it rides
// through: TTL/2 − 2 s, 10 s for the 24 s leases of replicated streams.
func renewEvery(ttl time.Duration) time.Duration { return min(ttl/3, renewMax) }

// renew renews the lease (renewEvery) until lctx ends or a renewal meets
// a conflict (another candidate changed the key); a renewal the store did
// not answer is tried again, four times as often. It returns the last
// revision it held. A watchdog independent of the
// renewal loop steps down once TTL/2 has passed without a successful
// renewal, even while this loop is stalled.
func (e *Election) renew(lctx context.Context, term Term, stepDown context.CancelFunc) uint64 {
	rev := term.Revision
	every := renewEvery(e.cfg.TTL)
	dog := time.AfterFunc(e.cfg.TTL/2, func() {
		if lctx.Err() == nil {
			e.log.Error("election: lease not renewed in time; stepping down")
		}
		stepDown()
	})
	defer dog.Stop()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-lctx.Done():
			return rev
		case <-t.C:
		}
		if e.pause != nil {
			e.pause()
		}
		if lctx.Err() != nil {
			return rev
		}
		ctx, cancel := context.WithTimeout(lctx, every)
		sent := time.Since(term.epoch)
		nrev, err := e.kv.Update(ctx, e.cfg.Key, e.value(), rev)
		cancel()
		if err != nil {
			if lctx.Err() != nil {
				return rev
			}
			if bus.IsConflict(err) {
				e.log.Error("election: lease taken or changed; stepping down", slog.Any("error", err))
				return rev
			}
			// The store did not answer (its stream electing a leader, a
			// reconnect): no one else can have renewed or taken the lease
			// through it either. Try again; the watchdog steps down at
			// TTL/2 after the last renewal that succeeded.
			e.log.Warn("election: lease renewal failed; trying again until the lease is half gone", slog.Any("error", err))
			if e.failed != nil {
				e.failed()
			}
			t.Reset(max(every/4, 10*time.Millisecond))
			continue
		}
		t.Reset(every)
		rev = nrev
		// The lease was renewed as of when the update was sent, not when
		// its answer came back.
		term.renewed.Store(int64(sent))
		dog.Reset(e.cfg.TTL/2 - (time.Since(term.epoch) - sent))
	}
}

// Holder reads a lease value: the holder's ID, and whether it still holds
// it (false for a lease released on a graceful stop). Whether a held lease
// is still renewed is for the reader to judge from the key's changes.
func Holder(value []byte) (id string, held bool) {
	var l lease
	if json.Unmarshal(value, &l) != nil {
		return "", false
	}
	return l.ID, l.ID != "" && !l.Released
}
