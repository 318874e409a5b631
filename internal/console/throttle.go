package console

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// The login throttle (docs/decisions/, "A login throttle that counts").
// Every password login reserves an attempt for its account (the name
// tried, known or not, so the throttle tells no one which names exist) and
// for its source address before the password is checked, both under one
// lock: concurrent guesses count as they start, not as they end, so no
// more than loginFailuresMax of them reach bcrypt. Past that many
// failures a key waits loginBackoffBase, then twice as long after each
// further failure, up to loginBackoffMax; while it waits, a login is
// refused (429) at no bcrypt cost, even with the right password. A
// success clears the account's failures (not the address's). Failures are
// forgotten loginFailureMemory after the last, once any wait has ended.
const (
	loginFailuresMax   = 10
	loginBackoffBase   = 30 * time.Second
	loginBackoffMax    = time.Hour
	loginFailureMemory = time.Hour
	// throttleKeysMax bounds the accounts and addresses remembered; past it
	// those idle longest are forgotten first.
	throttleKeysMax = 100_000
	// throttleKeyMax bounds the bytes of a name kept as a key.
	throttleKeyMax = 128
)

// Scopes of a throttled login (the scope label of
// narratoria_console_logins_throttled_total).
const (
	scopeAccount = "account"
	scopeAddress = "address"
)

// strikes are one key's failed logins.
type strikes struct {
	failed   int       // failures since the last success, or since forgotten
	inflight int       // attempts reserved and being checked now
	last     time.Time // the last failure (or reservation)
	until    time.Time // no attempt before this
}

// blocked says how long k must wait before another attempt (0: it may
// try now).
func (k *strikes) blocked(now time.Time) time.Duration {
	if now.Before(k.until) {
		return k.until.Sub(now)
	}
	switch {
	case k.failed+k.inflight < loginFailuresMax:
		return 0
	case k.failed >= loginFailuresMax && k.inflight == 0:
		return 0 // its wait is over: one attempt at a time
	}
	return time.Second // attempts being checked hold every slot
}

// fail notes a failed attempt and sets the wait past the limit.
func (k *strikes) fail(now time.Time) {
	k.failed++
	k.last = now
	if over := k.failed - loginFailuresMax; over >= 0 {
		wait := loginBackoffMax
		if over < 20 && loginBackoffBase<<over < loginBackoffMax {
			wait = loginBackoffBase << over
		}
		k.until = now.Add(wait)
	}
}

// throttle counts failed logins per account and per source address.
type throttle struct {
	now func() time.Time

	mu        sync.Mutex
	keys      map[string]*strikes
	lastSweep time.Time
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, keys: map[string]*strikes{}}
}

// accountKey and addressKey name a throttle's keys. An IPv6 address
// counts by its /64, the block one host usually holds; a malformed one
// as itself.
func accountKey(name string) string {
	if len(name) > throttleKeyMax {
		name = name[:throttleKeyMax]
	}
	return "u:" + name
}

func addressKey(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		if len(addr) > throttleKeyMax {
			addr = addr[:throttleKeyMax]
		}
		return "a:" + addr
	}
	ip = ip.Unmap()
	if ip.Is6() {
		return "a:" + netip.PrefixFrom(ip, 64).Masked().String()
	}
	return "a:" + ip.String()
}

// reserve takes an attempt for the account and the address, or says how
// long to wait and which of them is throttled. A reserved attempt must be
// released with its outcome, once.
func (t *throttle) reserve(account, addr string) (release func(ok bool), wait time.Duration, scope string) {
	now := t.now()
	ak, dk := accountKey(account), addressKey(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(now)
	a, d := t.key(ak), t.key(dk)
	if w := a.blocked(now); w > 0 {
		return nil, w, scopeAccount
	}
	if w := d.blocked(now); w > 0 {
		return nil, w, scopeAddress
	}
	a.inflight++
	d.inflight++
	a.last, d.last = now, now
	var once sync.Once
	return func(ok bool) { once.Do(func() { t.release(ak, dk, ok) }) }, 0, ""
}

func (t *throttle) release(ak, dk string, ok bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	a, d := t.key(ak), t.key(dk)
	a.inflight = max(a.inflight-1, 0)
	d.inflight = max(d.inflight-1, 0)
	if ok {
		a.failed, a.until = 0, time.Time{}
		return
	}
	a.fail(now)
	d.fail(now)
}

// key returns a key's strikes, making them if new. Lock held.
func (t *throttle) key(k string) *strikes {
	s := t.keys[k]
	if s == nil {
		s = &strikes{}
		t.keys[k] = s
	}
	return s
}

// sweep forgets keys with nothing to remember (at most once a minute),
// and those idle longest when there are too many. Lock held.
func (t *throttle) sweep(now time.Time) {
	if now.Sub(t.lastSweep) < time.Minute && len(t.keys) < throttleKeysMax {
		return
	}
	t.lastSweep = now
	for k, s := range t.keys {
		if s.inflight == 0 && !now.Before(s.until) && now.Sub(s.last) > loginFailureMemory {
			delete(t.keys, k)
		}
	}
	if len(t.keys) < throttleKeysMax {
		return
	}
	// Still full: forget the tenth idle longest (not those being checked).
	type idle struct {
		k    string
		last time.Time
	}
	var all []idle
	for k, s := range t.keys {
		if s.inflight == 0 {
			all = append(all, idle{k, s.last})
		}
	}
	slices.SortFunc(all, func(a, b idle) int { return a.last.Compare(b.last) })
	for _, e := range all[:min(len(all), throttleKeysMax/10)] {
		delete(t.keys, e.k)
	}
}
