package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/pkg/messages"
)

// auditPage reads a page of a console's /api/audit as the operator.
func (g *guardedConsole) auditPage(t *testing.T, query string) ([]AuditEntry, uint64) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/api/audit?"+query, nil)
	r.Host = "127.0.0.1:7420"
	w := httptest.NewRecorder()
	g.cs.Handler().ServeHTTP(w, authed(r))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var out struct {
		Entries []AuditEntry `json:"entries"`
		Next    uint64       `json:"next"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
	return out.Entries, out.Next
}

// flood sends refused logins to g for minutes simulated minutes: perMinute
// guesses a minute at one account, each minute from addrs addresses of its
// own, the clock moved a minute after each.
func (g *guardedConsole) flood(t *testing.T, minutes, perMinute, addrs int) {
	t.Helper()
	for m := range minutes {
		for i := range perMinute {
			a := m*addrs + i%addrs
			code, _ := g.login("gm", "guess", fmt.Sprintf("10.%d.%d.%d:1", a>>16&255, a>>8&255, a&255))
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, code)
		}
		g.clk.add(time.Minute)
	}
}

// TestActionsOutliveALoginFlood: an action written before an hour-long
// flood of refused logins (simulated: 3,000 in the first minute from 3,000
// addresses, then 300 a minute from 150) is still listed after it, though
// the audit streams hold only 1 MiB each: the flood is written as at most
// 101 entries a minute (one per address, the addresses past 100 together),
// on a stream of its own. One entry a refused login on the actions' stream,
// as before, pushes the action out.
func TestActionsOutliveALoginFlood(t *testing.T) {
	srv := natstest.Start(t)
	small := srv.Bus
	small.StreamMaxBytes = 1 << 20
	require.NoError(t, bus.Provision(t.Context(), srv.JS, small))
	g := guardedConsoleOn(t, srv, Options{})
	code, _ := g.login("viewer", testPassword, "192.0.2.77:1")
	require.Equal(t, http.StatusOK, code)
	g.flood(t, 1, 3000, 3000)
	g.flood(t, 59, 300, 150)
	g.cs.Close() // the last minute's entries

	entries, _ := g.auditPage(t, "limit=200")
	require.True(t, slices.ContainsFunc(entries, func(e AuditEntry) bool {
		return e.Action == "login" && e.Outcome == "ok" && e.User == "viewer" && e.Remote == "192.0.2.77"
	}), "the viewer's login is still listed: %+v", entries)
	refused := testutil.ToFloat64(g.cs.m.refusedLogins.WithLabelValues("refused")) + testutil.ToFloat64(g.cs.m.refusedLogins.WithLabelValues("throttled"))
	stored := testutil.ToFloat64(g.cs.m.loginEntries.WithLabelValues("stored"))
	t.Logf("%.0f refused logins in a simulated hour, written as %.0f entries", refused, stored)
	require.EqualValues(t, 3000+59*300, refused)
	require.LessOrEqual(t, stored, float64(60*(loginTallyAddrsMax+1)))
	require.Zero(t, testutil.ToFloat64(g.cs.m.loginEntries.WithLabelValues("failed")))
	st, err := srv.JS.Stream(t.Context(), messages.StreamAudit)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.CachedInfo().State.Msgs, "the actions' stream holds the one action")

	// The newest minute: the busiest addresses first, their count each,
	// the addresses past the first hundred in one entry.
	logins, _ := g.auditPage(t, "kind=logins&limit=200")
	require.NotEmpty(t, logins)
	last := logins[0].Time
	var minute []AuditEntry
	for _, e := range logins {
		if e.Time.Equal(last) {
			minute = append(minute, e)
		}
	}
	require.Len(t, minute, loginTallyAddrsMax+1)
	total, others := 0, 0
	for _, e := range minute {
		require.Equal(t, "refused", e.Outcome)
		require.Equal(t, last.Add(time.Minute), e.Until)
		require.Equal(t, []string{"gm"}, e.Users)
		total += e.Count
		if e.Remote == loginsOthers {
			others = e.Addresses
		}
	}
	require.Equal(t, 300, total)
	require.Equal(t, 50, others)
}

// TestTenantFloodLeavesOtherTenantsAudit: two tenants' consoles audit
// through the service's JetStream, as `narratoria up --tenants` runs them.
// acme's console is flooded for a simulated hour (refused logins, and
// 6,000 refused actions of a signed-in user); globex's page still lists
// globex's action and its refused login, and neither lists the other's.
func TestTenantFloodLeavesOtherTenantsAudit(t *testing.T) {
	srv := natstest.Start(t)
	acme := guardedConsoleOn(t, srv, Options{AuditTenant: "acme", AuditJS: srv.JS})
	globex := guardedConsoleOn(t, srv, Options{AuditTenant: "globex", AuditJS: srv.JS})
	code, _ := globex.login("viewer", testPassword, "192.0.2.10:1")
	require.Equal(t, http.StatusOK, code)
	code, _ = globex.login("viewer", "wrong", "192.0.2.11:1")
	require.Equal(t, http.StatusUnauthorized, code)
	globex.cs.Close()

	acme.flood(t, 60, 200, 120)
	entry, _ := json.Marshal(AuditEntry{Tenant: "acme", User: "viewer", Action: "approve", Outcome: "refused", Status: 403})
	for range 6000 {
		_, err := srv.JS.PublishAsync("narratoria.audit.acme.approve", entry)
		require.NoError(t, err)
	}
	select {
	case <-srv.JS.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("the flood of actions was not stored")
	}
	acme.cs.Close()

	actions, next := globex.auditPage(t, "")
	require.Len(t, actions, 1, "%+v", actions)
	require.Zero(t, next)
	require.Equal(t, AuditEntry{Seq: actions[0].Seq, Time: actions[0].Time, Tenant: "globex", User: "viewer", Role: RoleViewer, Via: "password",
		Action: "login", Outcome: "ok", Status: http.StatusOK, Remote: "192.0.2.10"}, actions[0])
	logins, _ := globex.auditPage(t, "kind=logins")
	require.Len(t, logins, 1)
	require.Equal(t, "192.0.2.11", logins[0].Remote)
	require.Equal(t, 1, logins[0].Count)

	acmeActions, _ := acme.auditPage(t, "limit=200")
	require.Len(t, acmeActions, 200)
	for _, e := range acmeActions {
		require.Equal(t, "acme", e.Tenant)
	}
	acmeLogins, _ := acme.auditPage(t, "kind=logins&limit=200")
	require.Len(t, acmeLogins, 200)
	for _, e := range acmeLogins {
		require.Equal(t, "acme", e.Tenant)
	}
}

// TestPageBySubject: pages read by subject filter, newest first, are
// exactly what a scan of the whole stream finds, whether the subject's
// messages are dense, sparse among another's, or both in turn.
func TestPageBySubject(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	_, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "PAGES", Subjects: []string{"pg.>"}, AllowDirect: true, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	var want []uint64 // sequences on pg.b, oldest first
	seq := uint64(0)
	put := func(subj string, n int) {
		for range n {
			_, err := srv.JS.PublishAsync(subj, []byte("x"))
			require.NoError(t, err)
			seq++
			if subj == "pg.b" {
				want = append(want, seq)
			}
		}
	}
	put("pg.b", 30)
	put("pg.a", 4000) // a flood of another subject
	put("pg.b", 700)  // dense
	for range 50 {    // sparse
		put("pg.a", 37)
		put("pg.b", 1)
	}
	put("pg.a", 900)
	<-srv.JS.PublishAsyncComplete()
	st, err := srv.JS.Stream(ctx, "PAGES")
	require.NoError(t, err)
	slices.Reverse(want)
	for _, limit := range []int{1, 7, 50, 200} {
		var got []uint64
		before := uint64(0)
		for pages := 0; ; pages++ {
			require.Less(t, pages, 2000)
			msgs, next, err := pageBySubject(ctx, st, "pg.b", before, limit)
			require.NoError(t, err)
			require.LessOrEqual(t, len(msgs), limit)
			for _, m := range msgs {
				require.Equal(t, "pg.b", m.Subject)
				got = append(got, m.Sequence)
			}
			if next == 0 {
				break
			}
			before = next
		}
		require.Equal(t, want, got, "limit %d", limit)
	}
	msgs, next, err := pageBySubject(ctx, st, "pg.none", 0, 50)
	require.NoError(t, err)
	require.Empty(t, msgs)
	require.Zero(t, next)
}
