package fairshare

import (
	"fmt"
	"strings"
	"testing"
)

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

// drain pops n jobs (all when n < 0) and returns them.
func drain(q *Queue[string], n int) []string {
	var out []string
	for n != 0 {
		_, _, v, ok := q.Pop()
		if !ok {
			break
		}
		out = append(out, v)
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
			want: "heavy/h/0 light/l/0 heavy/h/1 heavy/h/2 heavy/h/3 light/l/1 heavy/h/4 heavy/h/5"},
		{name: "a higher priority goes first, whoever had more",
			pushes: []push{{tenant: "a", session: "s", n: 2}, {prio: 2, tenant: "a", session: "s", n: 2}, {prio: 1, tenant: "b", session: "t", n: 1}}, pops: -1,
			want: "p2:a/s/0 p2:a/s/1 p1:b/t/0 a/s/0 a/s/1"},
		{name: "within a priority, fair shares",
			pushes: []push{{prio: 1, tenant: "a", session: "s", n: 3}, {prio: 1, tenant: "b", session: "t", n: 2}, {tenant: "c", session: "u", n: 1}}, pops: -1,
			want: "p1:a/s/0 p1:b/t/0 p1:a/s/1 p1:b/t/1 p1:a/s/2 c/u/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := New[string]()
			if tc.weight != nil {
				q.Weight = func(tenant string) float64 { return tc.weight[tenant] }
			}
			fill(q, tc.pushes)
			got := strings.Join(drain(q, tc.pops), " ")
			if got != tc.want {
				t.Errorf("order\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestNoCreditNoDebt: a tenant served a lot in an earlier busy period
// owes nothing; a tenant that comes back while another floods is served
// at the next turn, however much it was served before (a steady tenant is
// never made to wait for a newcomer's flood to catch up with it), and the
// flood's backlog earns no credit by waiting.
func TestNoCreditNoDebt(t *testing.T) {
	t.Parallel()
	q := New[string]()
	fill(q, []push{{tenant: "old", session: "s", n: 20}})
	drain(q, -1) // 20 jobs of service; then nothing waits
	fill(q, []push{{tenant: "old", session: "s", n: 2}, {tenant: "new", session: "s", n: 2}})
	if got := strings.Join(drain(q, -1), " "); got != "old/s/0 new/s/0 old/s/1 new/s/1" {
		t.Fatalf("after an earlier busy period: %s", got)
	}

	// acme is served steadily, alone, one job at a time; then globex
	// floods, and acme goes on sending one job per two served.
	q = New[string]()
	for i := range 30 {
		id := fmt.Sprintf("acme-%d", i)
		q.Push(id, Key{Tenant: "acme", Session: "a"}, id)
		if _, _, v, _ := q.Pop(); v != id {
			t.Fatalf("alone: %s", v)
		}
	}
	fill(q, []push{{tenant: "globex", session: "g", n: 30}})
	for i := range 10 {
		id := fmt.Sprintf("acme-late-%d", i)
		q.Push(id, Key{Tenant: "acme", Session: "a"}, id)
		got := drain(q, 2)
		if got[0] != id && got[1] != id {
			t.Fatalf("round %d: acme's job waited behind the flood: %v", i, got)
		}
	}

	// A tenant that comes back goes before a backlog that has been served.
	q = New[string]()
	fill(q, []push{{tenant: "globex", session: "g", n: 10}})
	drain(q, 3)
	fill(q, []push{{tenant: "acme", session: "a", n: 1}})
	if got := drain(q, 1); got[0] != "acme/a/0" {
		t.Fatalf("a returning tenant waited: %v", got)
	}
}

// TestShareUnderSustainedFlood: both tenants always have jobs waiting;
// over a long run each gets its weight's share (the property bench figure
// 12 measures end to end).
func TestShareUnderSustainedFlood(t *testing.T) {
	t.Parallel()
	for _, w := range []float64{1, 2, 3, 5} {
		q := New[string]()
		q.Weight = func(tenant string) float64 {
			if tenant == "heavy" {
				return w
			}
			return 1
		}
		served := map[string]int{}
		next := map[string]int{}
		for range 6000 {
			for _, tn := range []string{"heavy", "light"} {
				for q.Depth(tn) < 3 {
					id := fmt.Sprintf("%s-%d", tn, next[tn])
					next[tn]++
					q.Push(id, Key{Tenant: tn, Session: "s"}, tn)
				}
			}
			_, k, _, _ := q.Pop()
			served[k.Tenant]++
		}
		got := float64(served["heavy"]) / float64(served["light"])
		if got < w*0.98 || got > w*1.02 {
			t.Errorf("weight %.0f: share %.3f (%v)", w, got, served)
		}
	}
}

func TestRemoveAndReplace(t *testing.T) {
	t.Parallel()
	q := New[string]()
	fill(q, []push{{tenant: "a", session: "s", n: 3}, {tenant: "b", session: "t", n: 1}})
	if !q.Remove("a/s/1") || q.Remove("a/s/1") || q.Remove("nope") {
		t.Fatal("Remove reports wrongly")
	}
	if !q.Remove("b/t/0") || q.Depth("b") != 0 || q.Len() != 2 {
		t.Fatalf("after removing b's only job: depth %d, len %d", q.Depth("b"), q.Len())
	}
	q.Push("a/s/2", Key{Tenant: "a", Session: "s"}, "again") // same id and key: place kept, value replaced
	if got := strings.Join(drain(q, -1), " "); got != "a/s/0 again" {
		t.Fatalf("order after removals: %s", got)
	}
	if q.Len() != 0 || len(q.Depths()) != 0 || len(q.byID) != 0 || len(q.levels) != 0 {
		t.Fatalf("empty queue keeps state: len %d depths %v ids %d levels %d", q.Len(), q.Depths(), len(q.byID), len(q.levels))
	}
	if _, _, _, ok := q.Pop(); ok {
		t.Fatal("Pop of an empty queue")
	}
}

// TestRemoveHeadAndMiddle: removed jobs anywhere in a session are skipped.
func TestRemoveHeadAndMiddle(t *testing.T) {
	t.Parallel()
	q := New[string]()
	fill(q, []push{{tenant: "a", session: "s", n: 100}})
	for i := 0; i < 100; i += 2 {
		q.Remove(fmt.Sprintf("a/s/%d", i))
	}
	got := drain(q, -1)
	if len(got) != 50 || got[0] != "a/s/1" || got[49] != "a/s/99" {
		t.Fatalf("got %d jobs: first %v last %v", len(got), got[0], got[len(got)-1])
	}
}

// TestClocksStayBounded: a tenant's sessions that come and go leave no
// virtual time behind once it means nothing.
func TestClocksStayBounded(t *testing.T) {
	t.Parallel()
	q := New[string]()
	fill(q, []push{{tenant: "b", session: "x", n: 3 * pruneAbove}})
	for i := range 2 * pruneAbove {
		id := fmt.Sprint(i)
		q.Push(id, Key{Tenant: "a", Session: id}, id)
		q.Pop()
		q.Pop()
	}
	for _, l := range q.levels {
		if n := len(l.sessions["a"].vt); n > pruneAbove+1 {
			t.Fatalf("%d sessions' virtual times kept", n)
		}
	}
}

func BenchmarkPushPop(b *testing.B) {
	q := New[int]()
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
		q.Pop()
	}
}
