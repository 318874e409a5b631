package console

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Refused logins are audited in aggregate (docs/decisions/, "An audit
// trail no one can flush"): one entry per source address and minute, with
// how many logins from it were refused (wrong name or password) and how
// many throttled, written once that minute is over, on their own stream
// (NARRATORIA_AUDIT_LOGINS), apart from the actions. At most
// loginTallyAddrsMax addresses a minute get an entry of their own; the
// refusals of any further address are counted in one more entry. So a
// console writes at most loginTallyAddrsMax+1 such entries a minute,
// however many logins are refused.
const (
	loginTallyAddrsMax = 100
	// loginTallyUsersMax bounds the names an entry lists.
	loginTallyUsersMax = 5
	// loginTallyOthersMax bounds the further addresses counted one by one.
	loginTallyOthersMax = 10_000
	// loginsOthers is the Remote of the entry of further addresses.
	loginsOthers = "other addresses"
)

// sourceOf is the source a refused login is counted under: its address,
// an IPv6 one by its /64 (what one host usually holds), as the throttle
// counts it.
func sourceOf(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

// tally counts one source's refused logins in a minute.
type tally struct {
	refused, throttled int
	users              []string
	// addrs are the further addresses (the others' tally only).
	addrs map[string]struct{}
}

func (t *tally) add(user string, throttled bool) {
	if throttled {
		t.throttled++
	} else {
		t.refused++
	}
	if len(t.users) < loginTallyUsersMax && !slices.Contains(t.users, user) {
		t.users = append(t.users, user)
	}
}

// loginTally aggregates the refused logins of the current minute and
// hands each finished minute's entries to write: when the first refusal
// of a later minute comes, when a timer set for the minute's end fires,
// and at close.
type loginTally struct {
	now   func() time.Time
	write func([]AuditEntry)

	mu     sync.Mutex
	minute time.Time
	by     map[string]*tally
	others *tally
	timer  *time.Timer
	closed bool
	// writing counts the timer's writes under way (close waits for them).
	writing sync.WaitGroup
}

func newLoginTally(now func() time.Time, write func([]AuditEntry)) *loginTally {
	return &loginTally{now: now, write: write, by: map[string]*tally{}}
}

// note counts a refused login from addr for user.
func (lt *loginTally) note(addr, user string, throttled bool) {
	now := lt.now()
	minute := now.Truncate(time.Minute)
	src := sourceOf(addr)
	lt.mu.Lock()
	var done []AuditEntry
	if !minute.Equal(lt.minute) {
		done = lt.take()
		lt.minute = minute
	}
	t := lt.by[src]
	switch {
	case t != nil:
	case len(lt.by) < loginTallyAddrsMax:
		t = &tally{}
		lt.by[src] = t
	default:
		if lt.others == nil {
			lt.others = &tally{addrs: map[string]struct{}{}}
		}
		t = lt.others
		if len(t.addrs) < loginTallyOthersMax {
			t.addrs[src] = struct{}{}
		}
	}
	t.add(user, throttled)
	if lt.timer == nil && !lt.closed {
		lt.timer = time.AfterFunc(minute.Add(time.Minute).Sub(now)+time.Second, lt.due)
	}
	lt.mu.Unlock()
	if len(done) > 0 {
		lt.write(done)
	}
}

// due writes the minute's entries once it is over.
func (lt *loginTally) due() {
	lt.mu.Lock()
	lt.timer = nil
	var done []AuditEntry
	if !lt.now().Before(lt.minute.Add(time.Minute)) {
		done = lt.take()
	}
	if len(done) > 0 {
		lt.writing.Add(1)
		defer lt.writing.Done()
	}
	lt.mu.Unlock()
	if len(done) > 0 {
		lt.write(done)
	}
}

// close writes what is counted, the current minute included, and stops
// the timer. Idempotent.
func (lt *loginTally) close() {
	lt.mu.Lock()
	lt.closed = true
	if lt.timer != nil {
		lt.timer.Stop()
		lt.timer = nil
	}
	done := lt.take()
	lt.mu.Unlock()
	if len(done) > 0 {
		lt.write(done)
	}
	lt.writing.Wait()
}

// take turns the counts into entries and starts afresh. Lock held.
func (lt *loginTally) take() []AuditEntry {
	if len(lt.by) == 0 && lt.others == nil {
		return nil
	}
	out := make([]AuditEntry, 0, len(lt.by)+1)
	for src, t := range lt.by {
		out = append(out, lt.entry(src, t))
	}
	slices.SortFunc(out, func(a, b AuditEntry) int { return b.Count - a.Count })
	if lt.others != nil {
		e := lt.entry(loginsOthers, lt.others)
		e.Addresses = len(lt.others.addrs)
		out = append(out, e)
	}
	lt.by, lt.others = map[string]*tally{}, nil
	return out
}

func (lt *loginTally) entry(src string, t *tally) AuditEntry {
	e := AuditEntry{Time: lt.minute.UTC(), Until: lt.minute.Add(time.Minute).UTC(), Action: "login", Via: "password", Outcome: "refused",
		Remote: src, Users: t.users, Count: t.refused + t.throttled, Throttled: t.throttled, Status: 401}
	if len(t.users) > 0 {
		e.User = t.users[0]
	}
	if t.throttled > 0 {
		e.Status = 429
	}
	e.Error = fmt.Sprintf("%d refused logins in this minute: %d wrong name or password, %d throttled", e.Count, t.refused, t.throttled)
	return e
}
