package fairshare

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// push adds jobs named <tenant>/<session>/<n> for a compact table.
type push struct {
	prio    int
	tenant  string
	session string
	n       int
}

func fill(q *Queue[string], ps []push) {
	for _, p := range ps {
		for i := range p.n {
			id := fmt.Sprintf("%s/%s/%d", p.tenant, p.session, i)
			if p.prio != 0 {
				id = fmt.Sprintf("p%d:%s", p.prio, id)
			}
			q.Push(id, Key{Priority: p.prio, Tenant: p.tenant, Session: p.session}, id)
		}
	}
}

// drain pops n jobs (all when n < 0), one every step, and returns them.
func drain(q *Queue[string], n int, now time.Time, step time.Duration) []string {
	var out []string
	for n != 0 {
		_, _, v, ok := q.Pop(now)
		if !ok {
			break
		}
		out = append(out, v)
		now = now.Add(step)
		n--
	}
	return out
}

func TestPopOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		weight map[string]float64
		pushes []push
		pops   int
		want   string
	}{
		{name: "one session is first in, first out",
			pushes: []push{{tenant: "a", session: "s", n: 3}}, pops: -1,
			want: "a/s/0 a/s/1 a/s/2"},
		{name: "a flood does not keep a later tenant waiting behind it",
			pushes: []push{{tenant: "globex", session: "g", n: 5}, {tenant: "acme", session: "a", n: 2}}, pops: -1,
			want: "globex/g/0 acme/a/0 globex/g/1 acme/a/1 globex/g/2 globex/g/3 globex/g/4"},
		{name: "sessions of one tenant share it",
			pushes: []push{{tenant: "t", session: "bot", n: 4}, {tenant: "t", session: "player", n: 2}}, pops: -1,
			want: "t/bot/0 t/player/0 t/bot/1 t/player/1 t/bot/2 t/bot/3"},
		{name: "tenants first, then sessions: a tenant with many sessions gets no more",
			pushes: []push{{tenant: "a", session: "1", n: 2}, {tenant: "a", session: "2", n: 2}, {tenant: "a", session: "3", n: 2}, {tenant: "b", session: "x", n: 3}}, pops: 6,
			want: "a/1/0 b/x/0 a/2/0 b/x/1 a/3/0 b/x/2"},
		{name: "weight 3 gets three jobs for one",
			weight: map[string]float64{"heavy": 3},
			pushes: []push{{tenant: "heavy", session: "h", n: 9}, {tenant: "light", session: "l", n: 9}}, pops: 8,
			want: "heavy/h/0 light/l/0 heavy/h/1 heavy/h/2 light/l/1 heavy/h/3 heavy/h/4 heavy/h/5"},
		{name: "a higher priority goes first, whoever had more",
			pushes: []push{{tenant: "a", session: "s", n: 2}, {prio: 2, tenant: "a", session: "s", n: 2}, {prio: 1, tenant: "b", session: "t", n: 1}}, pops: -1,
			want: "p2:a/s/0 p2:a/s/1 p1:b/t/0 a/s/0 a/s/1"},
		{name: "within a priority, fair shares",
			pushes: []push{{prio: 1, tenant: "a", session: "s", n: 3}, {prio: 1, tenant: "b", session: "t", n: 2}, {tenant: "c", session: "u", n: 1}}, pops: -1,
			want: "p1:a/s/0 p1:b/t/0 p1:a/s/1 p1:b/t/1 p1:a/s/2 c/u/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := New[string](HalfLifeDefault)
			if tc.weight != nil {
				q.Weight = func(tenant string) float64 { return tc.weight[tenant] }
			}
			fill(q, tc.pushes)
			got := strings.Join(drain(q, tc.pops, t0, time.Millisecond), " ")
			if got != tc.want {
				t.Errorf("order\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestServiceLately: service is forgotten with the half-life, so a tenant
// served a lot long ago competes as a fresh one, and one served a lot just
// now yields.
func TestServiceLately(t *testing.T) {
	t.Parallel()
	q := New[string](10 * time.Second)
	fill(q, []push{{tenant: "old", session: "s", n: 20}})
	drain(q, 20, t0, 0) // 20 jobs of service at t0
	fill(q, []push{{tenant: "old", session: "s", n: 2}, {tenant: "new", session: "s", n: 2}})
	// Right after: the newcomer goes first, twice.
	if got := strings.Join(drain(q, 2, t0.Add(time.Second), 0), " "); got != "new/s/0 new/s/1" {
		t.Fatalf("just after the flood: %s", got)
	}
	q2 := New[string](10 * time.Second)
	fill(q2, []push{{tenant: "old", session: "s", n: 20}})
	drain(q2, 20, t0, 0)
	q2.charge(Key{Tenant: "new", Session: "s"}, t0.Add(10*time.Minute))
	fill(q2, []push{{tenant: "old", session: "s", n: 1}, {tenant: "new", session: "s", n: 1}})
	// Ten minutes later the old flood is forgotten (2^-60 of it left): the
	// tenant served one job just now yields to it.
	if got := strings.Join(drain(q2, 1, t0.Add(10*time.Minute), 0), " "); got != "old/s/0" {
		t.Fatalf("long after the flood: %s", got)
	}
}

// TestShareUnderSustainedFlood: both tenants always have jobs waiting;
// over a long run each gets its weight's share (the property bench figure
// 12 measures end to end).
func TestShareUnderSustainedFlood(t *testing.T) {
	t.Parallel()
	for _, w := range []float64{1, 2, 3, 5} {
		q := New[string](HalfLifeDefault)
		q.Weight = func(tenant string) float64 {
			if tenant == "heavy" {
				return w
			}
			return 1
		}
		served := map[string]int{}
		now := t0
		next := map[string]int{}
		for range 6000 {
			for _, tn := range []string{"heavy", "light"} {
				for q.Depth(tn) < 3 {
					id := fmt.Sprintf("%s-%d", tn, next[tn])
					next[tn]++
					q.Push(id, Key{Tenant: tn, Session: "s"}, tn)
				}
			}
			_, k, _, _ := q.Pop(now)
			served[k.Tenant]++
			now = now.Add(50 * time.Millisecond)
		}
		got := float64(served["heavy"]) / float64(served["light"])
		if got < w*0.98 || got > w*1.02 {
			t.Errorf("weight %.0f: share %.3f (%v)", w, got, served)
		}
	}
}

func TestRemoveAndReplace(t *testing.T) {
	t.Parallel()
	q := New[string](0)
	fill(q, []push{{tenant: "a", session: "s", n: 3}, {tenant: "b", session: "t", n: 1}})
	if !q.Remove("a/s/1") || q.Remove("a/s/1") || q.Remove("nope") {
		t.Fatal("Remove reports wrongly")
	}
	if !q.Remove("b/t/0") || q.Depth("b") != 0 || q.Len() != 2 {
		t.Fatalf("after removing b's only job: depth %d, len %d", q.Depth("b"), q.Len())
	}
	q.Push("a/s/2", Key{Tenant: "a", Session: "s"}, "again") // same id and key: place kept, value replaced
	if got := strings.Join(drain(q, -1, t0, 0), " "); got != "a/s/0 again" {
		t.Fatalf("order after removals: %s", got)
	}
	if q.Len() != 0 || len(q.Depths()) != 0 || len(q.byID) != 0 || len(q.levels) != 0 {
		t.Fatalf("empty queue keeps state: len %d depths %v ids %d levels %d", q.Len(), q.Depths(), len(q.byID), len(q.levels))
	}
	if _, _, _, ok := q.Pop(t0); ok {
		t.Fatal("Pop of an empty queue")
	}
}

// TestRemoveHeadAndMiddle: removed jobs anywhere in a session are skipped.
func TestRemoveHeadAndMiddle(t *testing.T) {
	t.Parallel()
	q := New[string](0)
	fill(q, []push{{tenant: "a", session: "s", n: 100}})
	for i := 0; i < 100; i += 2 {
		q.Remove(fmt.Sprintf("a/s/%d", i))
	}
	got := drain(q, -1, t0, 0)
	if len(got) != 50 || got[0] != "a/s/1" || got[49] != "a/s/99" {
		t.Fatalf("got %d jobs: first %v last %v", len(got), got[0], got[len(got)-1])
	}
}

func TestPruneForgottenSessions(t *testing.T) {
	t.Parallel()
	q := New[string](time.Second)
	for i := range pruneAbove + 10 {
		id := fmt.Sprint(i)
		q.Push(id, Key{Tenant: "a", Session: id}, id)
		q.Pop(t0.Add(time.Duration(i) * time.Minute))
	}
	if n := len(q.tenants["a"].sessions); n > pruneAbove {
		t.Fatalf("%d sessions' service kept", n)
	}
}

func BenchmarkPushPop(b *testing.B) {
	q := New[int](0)
	now := t0
	keys := []Key{{Tenant: "a", Session: "1"}, {Tenant: "a", Session: "2"}, {Tenant: "b", Session: "3"}, {Priority: 1, Tenant: "c", Session: "4"}}
	for i := range 64 {
		q.Push(fmt.Sprint(i), keys[i%len(keys)], i)
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint(i + 64)
	}
	b.ResetTimer()
	for i := range b.N {
		q.Push(ids[i%len(ids)], keys[i%len(keys)], i)
		q.Pop(now)
		now = now.Add(time.Microsecond)
	}
}
