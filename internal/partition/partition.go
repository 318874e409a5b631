// Package partition shares P partitions among the live instances of a
// component (SPEC §10 "Scale"): sessions map to partitions by a stable hash
// of the session ID, every instance owns its share, and each partition has
// one owner at a time, held by a lease (internal/election) on a KV key.
//
// Membership: each instance writes m.<id> every TTL/3; an instance counts as
// live while its key keeps changing (seen on the observer's own clock,
// within TTL). Balance: the live members, sorted by ID, take partitions
// round-robin (partition k goes to member k mod N), so each holds ⌈P/N⌉
// or ⌊P/N⌋. An instance campaigns only for the partitions it should own
// and releases (gracefully: the key is deleted, the next owner takes over
// at once) those it should not; a dead instance's partitions are taken
// over when their leases lapse (TTL + TTL/6).
//
// Safety is the election's: never two owners acting on one partition, and
// every owner gets the lease's revision (a fencing token) to fence its
// writes. Liveness: takeover within TTL + a check interval after a crash;
// rebalancing when a member joins or leaves within a few check intervals.
package partition

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/election"
)

// CountDefault is the number of partitions.
const CountDefault = 32

// Of returns the partition of a session: a stable hash of its ID.
func Of(session string, count int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(session))
	return int(h.Sum32() % uint32(count))
}

// Config configures a Manager.
type Config struct {
	// ID identifies the instance. Required.
	ID string
	// Count is the number of partitions. Default 32.
	Count int
	// TTL is the membership and lease TTL. Default 3s.
	TTL time.Duration
	// Logger receives the manager's logs. Default: discard.
	Logger *slog.Logger
}

// Own is called when the instance becomes the owner of partition p; ctx
// ends the moment it stops being the owner. It must return promptly then.
type Own func(ctx context.Context, p int, term election.Term)

// Manager keeps an instance's share of the partitions.
type Manager struct {
	kv  jetstream.KeyValue
	cfg Config
	log *slog.Logger
	own Own

	mu      sync.Mutex
	running map[int]context.CancelFunc // partitions this instance campaigns for
	owned   map[int]bool
	wg      sync.WaitGroup
}

// New builds a manager on a KV bucket (keys m.<id> and p.<n>).
func New(kv jetstream.KeyValue, cfg Config, own Own) (*Manager, error) {
	if cfg.ID == "" {
		return nil, errors.New("partition: ID is required")
	}
	if cfg.Count <= 0 {
		cfg.Count = CountDefault
	}
	if cfg.TTL <= 0 {
		cfg.TTL = election.TTLDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{kv: kv, cfg: cfg, log: cfg.Logger.With(slog.String("instance", cfg.ID)), own: own,
		running: map[int]context.CancelFunc{}, owned: map[int]bool{}}, nil
}

// Owned returns the partitions this instance owns now, sorted.
func (m *Manager) Owned() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.owned))
	for p := range m.owned {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Run keeps the instance's share until ctx ends; then it hands every
// partition over (their leases are released) and returns.
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.TTL / 6)
	defer tick.Stop()
	seen := map[string]seenMember{}
	lastBeat := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastBeat) >= m.cfg.TTL/3 {
			bctx, cancel := context.WithTimeout(ctx, m.cfg.TTL/3)
			if _, err := m.kv.Put(bctx, "m."+m.cfg.ID, []byte(strconv.FormatInt(time.Now().UnixNano(), 10))); err != nil && ctx.Err() == nil {
				m.log.Warn("partition: heartbeat failed", slog.Any("error", err))
			} else {
				lastBeat = time.Now()
			}
			cancel()
		}
		if members, err := m.members(ctx, seen); err == nil {
			m.balance(ctx, members)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	m.mu.Lock()
	for _, cancel := range m.running {
		cancel()
	}
	m.mu.Unlock()
	m.wg.Wait()
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = m.kv.Delete(dctx, "m."+m.cfg.ID)
	cancel()
}

type seenMember struct {
	rev  uint64
	when time.Time
}

// members lists the live members, sorted: those whose key changed within
// TTL as seen from here (this instance always counts).
func (m *Manager) members(ctx context.Context, seen map[string]seenMember) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, m.cfg.TTL/3)
	defer cancel()
	keys, err := m.kv.ListKeysFiltered(lctx, "m.>")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	live := []string{m.cfg.ID}
	for k := range keys.Keys() {
		id := k[2:]
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

// balance campaigns for the partitions this instance should own and
// releases the others.
func (m *Manager) balance(ctx context.Context, members []string) {
	rank := slices.Index(members, m.cfg.ID)
	want := map[int]bool{}
	for p := range m.cfg.Count {
		if p%len(members) == rank {
			want[p] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, cancel := range m.running {
		if !want[p] {
			m.log.Info("partition: handing over", slog.Int("partition", p))
			cancel()
			delete(m.running, p)
		}
	}
	for p := range want {
		if _, ok := m.running[p]; ok {
			continue
		}
		el, err := election.New(m.kv, election.Config{ID: m.cfg.ID, Key: fmt.Sprintf("p.%d", p), TTL: m.cfg.TTL, Logger: m.log})
		if err != nil {
			m.log.Error("partition: cannot campaign", slog.Any("error", err))
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		m.running[p] = cancel
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			el.Run(pctx, func(octx context.Context, term election.Term) {
				m.mu.Lock()
				m.owned[p] = true
				m.mu.Unlock()
				m.own(octx, p, term)
				<-octx.Done()
				m.mu.Lock()
				delete(m.owned, p)
				m.mu.Unlock()
			})
		}()
	}
}
