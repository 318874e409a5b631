// Package partition shares P partitions among the live instances of a
// component (docs/spec.md §10 "Scale"): sessions map to partitions by a stable hash
// of the session ID, every instance owns its share, and each partition has
// one owner at a time, held by a lease (internal/election) on a KV key.
//
// Keys (in one bucket, narratoria_owners, shared by every group):
//
//	<group>.m.<id>   an instance's heartbeat, written every TTL/3
//	<group>.p.<n>    the lease of partition n (election value: holder ID)
//
// Membership: an instance counts as live while its heartbeat key keeps
// changing (seen on the observer's own clock, within TTL). Balance: the
// live members, sorted by ID, take partitions round-robin (partition k
// goes to member k mod N), so each holds ⌈P/N⌉ or ⌊P/N⌋. An instance
// campaigns only for the partitions it should own and hands over those it
// should not: its Own callback returns once its work there has stopped,
// then the lease is marked released and the next owner takes it at its
// next check. A dead instance's partitions are taken over when their
// leases lapse.
//
// Safety is the election's: at most one instance acts as a partition's
// owner at a time, and Term.Held lets an owner check right before acting
// that it was not paused past its lease. Components fence their writes
// too (see Fence), so a write from an owner that lost the partition is
// refused by the server, not merely unlikely. Liveness: after a crash a
// partition moves within TTL + TTL/3 (its lease lapses; the heartbeat
// that makes the dead instance leave the balance lapses alongside); a
// graceful hand-over takes a check interval (TTL/6); a join rebalances
// within a few check intervals.
package partition

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"

	"github.com/narratoria/runtime/internal/election"
)

// ReplicatedTTL is the lease TTL the components default to when the
// streams are replicated (nats.replicas > 1). A holder steps down at TTL/2
// without a confirmed renewal, and a replicated bucket's stream whose
// leader dies is unwritable while it elects another — 4 to 9 s on
// nats-server's defaults — so a lease must outlast twice that to ride
// through it (renewed every 2 s, a holder rides through 10 s); 3 s leases
// stepped every partition down at each election (TestClusterFailure: the
// longest stall 27.6 s, against 12–17 s with 20 s leases renewed every
// 6.7 s). The price: a crashed instance's partitions move after about 28 s.
const ReplicatedTTL = 24 * time.Second

// LeaseTTL is a component's lease TTL: the configured one, or when none
// is configured (0) ReplicatedTTL on replicated streams, else 0 (the
// component's own default).
func LeaseTTL(configured time.Duration, replicas int) time.Duration {
	if configured == 0 && replicas > 1 {
		return ReplicatedTTL
	}
	return configured
}

// CountDefault is the number of partitions.
const CountDefault = 32

// CountMax bounds the number of partitions (one durable consumer per
// partition and stream).
const CountMax = 1024

// Of returns the partition of a session: the FNV-1a hash of its ID modulo
// count, exactly what a JetStream subject transform {{partition(count,n)}}
// computes from that one token, so the server and the components agree.
func Of(session string, count int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(session))
	return int(h.Sum32() % uint32(count))
}

// Config configures a Manager.
type Config struct {
	// ID identifies the instance. Required.
	ID string
	// Group names the component whose instances share partitions
	// ("scheduler", "narrator"). Default "default".
	Group string
	// Count is the number of partitions. Default 32.
	Count int
	// TTL is the membership and lease TTL. Default 3s.
	TTL time.Duration
	// Logger receives the manager's logs. Default: discard.
	Logger *slog.Logger
}

// Own runs while the instance owns partition p: ctx ends the moment it
// stops being the owner (hand-over, lost lease, Run ending). Own must then
// stop its work on p and return; the lease is released only after it has.
// Returning earlier gives the partition up (e.g. after a write was
// refused by the fence).
type Own func(ctx context.Context, p int, term election.Term)

// Manager keeps an instance's share of the partitions.
type Manager struct {
	kv  jetstream.KeyValue
	cfg Config
	log *slog.Logger
	own Own

	mu      sync.Mutex
	running map[int]campaign // partitions this instance campaigns for or is handing over
	owned   map[int]bool
	members []string // as last seen, to log a change once
	// leases: each partition lease's last revision and when this
	// instance saw it change (the watch in Run), so a campaign for a
	// partition whose holder died starts with the lease's silence already
	// measured.
	leases map[int]leaseSeen
	wg     sync.WaitGroup
}

type leaseSeen struct {
	rev uint64
	at  time.Time
}

// New builds a manager on a KV bucket.
func New(kv jetstream.KeyValue, cfg Config, own Own) (*Manager, error) {
	if cfg.ID == "" {
		return nil, errors.New("partition: ID is required")
	}
	if strings.ContainsAny(cfg.ID, ".*> ") {
		return nil, fmt.Errorf("partition: ID %q must be one subject token", cfg.ID)
	}
	cfg.Group = cmpOr(cfg.Group, "default")
	if cfg.Count <= 0 {
		cfg.Count = CountDefault
	}
	if cfg.Count > CountMax {
		return nil, fmt.Errorf("partition: Count %d is over %d", cfg.Count, CountMax)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = election.TTLDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{kv: kv, cfg: cfg, log: cfg.Logger.With(slog.String("instance", cfg.ID), slog.String("group", cfg.Group)), own: own,
		running: map[int]campaign{}, owned: map[int]bool{}, leases: map[int]leaseSeen{}}, nil
}

// campaign is one partition's election; done closes when it has ended
// (Own returned, lease released).
type campaign struct {
	cancel context.CancelFunc
	done   chan struct{}
	ending bool
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Owned returns the partitions this instance owns now, sorted.
func (m *Manager) Owned() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.owned))
}

func (m *Manager) memberKey(id string) string { return m.cfg.Group + ".m." + id }

// LeaseKey is the key of partition p's lease in a group.
func LeaseKey(group string, p int) string { return group + ".p." + strconv.Itoa(p) }

// Run keeps the instance's share until ctx ends; then it hands every
// partition over (each Own returns, then its lease is released) and
// returns.
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.TTL / 6)
	defer tick.Stop()
	seen := map[string]seenMember{}
	lastBeat := time.Time{}
	var leaseUpdates <-chan jetstream.KeyValueEntry
	if w, err := m.kv.Watch(ctx, m.cfg.Group+".p.*", jetstream.MetaOnly()); err == nil {
		defer bus.StopWatch(w)
		leaseUpdates = w.Updates()
	} else {
		m.log.Warn("partition: cannot watch the leases; a dead instance's partitions move a lease TTL later", slog.Any("error", err))
	}
	for ctx.Err() == nil {
		if time.Since(lastBeat) >= m.cfg.TTL/3 {
			bctx, cancel := context.WithTimeout(ctx, m.cfg.TTL/3)
			if _, err := m.kv.Put(bctx, m.memberKey(m.cfg.ID), []byte(strconv.FormatInt(time.Now().UnixNano(), 10))); err != nil && ctx.Err() == nil {
				m.log.Warn("partition: heartbeat failed", slog.Any("error", err))
			} else {
				lastBeat = time.Now()
			}
			cancel()
		}
		if members, err := m.liveMembers(ctx, seen); err == nil {
			m.balance(ctx, members)
		}
		m.waitTick(ctx, tick.C, leaseUpdates)
	}
	m.mu.Lock()
	for _, c := range m.running {
		c.cancel()
	}
	m.mu.Unlock()
	m.wg.Wait()
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = m.kv.Delete(dctx, m.memberKey(m.cfg.ID))
	cancel()
}

// waitTick waits for the next tick, recording lease changes meanwhile.
func (m *Manager) waitTick(ctx context.Context, tick <-chan time.Time, updates <-chan jetstream.KeyValueEntry) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			return
		case e, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			if e == nil {
				continue // the watch caught up
			}
			p, err := strconv.Atoi(e.Key()[strings.LastIndexByte(e.Key(), '.')+1:])
			if err != nil {
				continue
			}
			m.mu.Lock()
			m.leases[p] = leaseSeen{rev: e.Revision(), at: time.Now()}
			m.mu.Unlock()
		}
	}
}

type seenMember struct {
	rev  uint64
	when time.Time
}

// liveMembers lists the live members, sorted: those whose heartbeat
// changed within TTL as seen from here (this instance always counts).
func (m *Manager) liveMembers(ctx context.Context, seen map[string]seenMember) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, m.cfg.TTL/3)
	defer cancel()
	prefix := m.memberKey("")
	keys, err := m.kv.ListKeysFiltered(lctx, prefix+"*")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	live := []string{m.cfg.ID}
	for k := range keys.Keys() {
		id := k[len(prefix):]
		if id == m.cfg.ID {
			continue
		}
		e, err := m.kv.Get(lctx, k)
		if err != nil {
			continue
		}
		s, ok := seen[id]
		if !ok || s.rev != e.Revision() {
			s = seenMember{rev: e.Revision(), when: now}
			seen[id] = s
		}
		if now.Sub(s.when) < m.cfg.TTL {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	return live, nil
}

// share returns the partitions member rank of n members owns when count
// partitions are shared round-robin.
func share(count, n, rank int) []int {
	var out []int
	for p := rank; p < count; p += n {
		out = append(out, p)
	}
	return out
}

// balance campaigns for the partitions this instance should own and
// hands over the others.
func (m *Manager) balance(ctx context.Context, members []string) {
	want := map[int]bool{}
	for _, p := range share(m.cfg.Count, len(members), slices.Index(members, m.cfg.ID)) {
		want[p] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Equal(m.members, members) {
		m.log.Info("partition: members changed", slog.Any("members", members), slog.Int("share", len(want)))
		m.members = members
	}
	for p, c := range m.running {
		select {
		case <-c.done: // ended (handed over, or Own gave it up): campaign again if wanted
			delete(m.running, p)
			continue
		default:
		}
		if !want[p] && !c.ending {
			c.cancel()
			c.ending = true
			m.running[p] = c
		}
	}
	for p := range want {
		if _, ok := m.running[p]; ok {
			// Campaigning, or still handing over: a new campaign waits
			// until the old one has ended, so one process never runs
			// Own twice for a partition.
			continue
		}
		el, err := election.New(m.kv, election.Config{ID: m.cfg.ID, Key: LeaseKey(m.cfg.Group, p), TTL: m.cfg.TTL, Logger: m.log,
			Seen: func() (uint64, time.Time) {
				m.mu.Lock()
				defer m.mu.Unlock()
				return m.leases[p].rev, m.leases[p].at
			}})
		if err != nil {
			m.log.Error("partition: cannot campaign", slog.Any("error", err))
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		m.running[p] = campaign{cancel: cancel, done: done}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer close(done)
			defer cancel()
			el.Run(pctx, func(octx context.Context, term election.Term) { m.hold(octx, p, term) })
		}()
	}
}

// hold runs Own for a won partition and keeps Owned true meanwhile.
func (m *Manager) hold(ctx context.Context, p int, term election.Term) {
	m.mu.Lock()
	m.owned[p] = true
	m.mu.Unlock()
	if term.Previous != "" {
		m.log.Info("partition: moved", slog.Int("partition", p), slog.String("from", term.Previous), slog.String("to", m.cfg.ID))
	} else {
		m.log.Debug("partition: owned", slog.Int("partition", p))
	}
	defer func() {
		m.mu.Lock()
		delete(m.owned, p)
		m.mu.Unlock()
	}()
	m.own(ctx, p, term)
}

// Owners reads the partition map of a group: the holder of each
// partition's lease ("" when nobody holds it). A lease whose holder died
// still names it until another instance takes it over.
func Owners(ctx context.Context, kv jetstream.KeyValue, group string, count int) (map[int]string, error) {
	out := make(map[int]string, count)
	lister, err := kv.ListKeysFiltered(ctx, group+".p.*")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return out, nil
		}
		return nil, fmt.Errorf("list %s partitions: %w", group, err)
	}
	for k := range lister.Keys() {
		p, err := strconv.Atoi(k[strings.LastIndexByte(k, '.')+1:])
		if err != nil || p < 0 || p >= count {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		if id, held := election.Holder(e.Value()); held {
			out[p] = id
		}
	}
	return out, nil
}
