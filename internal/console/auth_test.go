package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestPasswordAndTokenChecks: a password matches its bcrypt hash only, a
// token its SHA-256 only; an unknown name, an empty token and a user
// without a password are refused.
func TestPasswordAndTokenChecks(t *testing.T) {
	a, err := newAuthn(testUsers(), nil, 0)
	require.NoError(t, err)
	u, ok := a.checkPassword("gm", testPassword)
	require.True(t, ok)
	require.Equal(t, RoleGameMaster, u.Role)
	for _, c := range [][2]string{{"gm", testPassword + "x"}, {"gm", ""}, {"nobody", testPassword}, {"ops", ""}, {"ops", opsToken}} {
		_, ok := a.checkPassword(c[0], c[1])
		require.False(t, ok, "%q / %q", c[0], c[1])
	}
	u, ok = a.checkToken(opsToken)
	require.True(t, ok)
	require.Equal(t, "ops", u.Name)
	for _, tok := range []string{"", opsToken + "x", testPassword, strings.TrimPrefix(opsTokenHash, "sha256:")} {
		_, ok := a.checkToken(tok)
		require.False(t, ok, "%q", tok)
	}
	// Configuration mistakes are named.
	for _, u := range []User{
		{Name: "x", Role: RoleViewer},
		{Name: "x", Role: "king", PasswordHash: testPasswordHash},
		{Name: "x", Role: RoleViewer, PasswordHash: "plain"},
		{Name: "x", Role: RoleViewer, TokenHash: "sha256:abc"},
	} {
		require.Error(t, CheckUser(u), "%+v", u)
	}
	_, err = HashPassword("short")
	require.Error(t, err)
}

// TestTrustedProxyOnlyFromItsSources: the proxy's user header signs a user
// in only on requests from the proxy's addresses; from anywhere else it is
// ignored (the request has no login).
func TestTrustedProxyOnlyFromItsSources(t *testing.T) {
	p := &TrustedProxy{Sources: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		UserHeader: "X-Forwarded-User", RoleHeader: "X-Forwarded-Role", Roles: map[string]Role{"alice": RoleOperator}, DefaultRole: RoleViewer}
	a, err := newAuthn(nil, p, 0)
	require.NoError(t, err)
	req := func(remote, user, role string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/api/me", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-User", user)
		if role != "" {
			r.Header.Set("X-Forwarded-Role", role)
		}
		return r
	}
	for _, remote := range []string{"192.168.1.5:4000", "11.0.0.1:1", "127.0.0.1:80", "[::2]:80", "garbage"} {
		_, ok, err := a.identify(req(remote, "alice", "operator"))
		require.NoError(t, err)
		require.False(t, ok, "headers from %s are ignored", remote)
	}
	id, ok, err := a.identify(req("10.1.2.3:5555", "alice", ""))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Identity{Name: "alice", Role: RoleOperator, Via: "proxy"}, id)
	id, ok, err = a.identify(req("[::1]:5555", "bob", "gm"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, RoleGameMaster, id.Role, "the role header wins")
	id, _, _ = a.identify(req("[::ffff:10.0.0.9]:1", "carol", ""))
	require.Equal(t, RoleViewer, id.Role, "the default role")
	_, _, err = a.identify(req("10.0.0.9:1", "carol", "king"))
	require.Error(t, err)
}

// TestLoginsAndRoles through the API on a real NATS server: no login is a
// 401 (the page itself loads); a wrong password too; a viewer reads but
// gets 403 naming the role for an approval, and a reset is an operator's;
// logout ends the session; the audit trail holds the failed login and
// the refused approval.
func TestLoginsAndRoles(t *testing.T) {
	srv := natstest.Start(t)
	require.NoError(t, bus.Provision(t.Context(), srv.JS, srv.Bus))
	cs, err := New(srv.NC, Options{Users: testUsers()})
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	do := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, web.URL+path, strings.NewReader(body))
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}
	code, _ := do(http.MethodGet, "/", "")
	require.Equal(t, http.StatusOK, code, "the page loads without a login")
	for _, path := range []string{"/api/me", "/api/plans", "/api/skills", "/api/audit", "/api/events"} {
		code, out := do(http.MethodGet, path, "")
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.Contains(t, out["error"], "log in")
	}
	code, _ = do(http.MethodPost, "/api/sessions/s1/reset", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = do(http.MethodPost, "/api/login", `{"name":"viewer","password":"wrong password"}`)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = do(http.MethodGet, "/api/me", "")
	require.Equal(t, http.StatusUnauthorized, code)

	code, out := do(http.MethodPost, "/api/login", `{"name":"viewer","password":"`+testPassword+`"}`)
	require.Equal(t, http.StatusOK, code, out)
	u, _ := http.NewRequest(http.MethodGet, web.URL, nil)
	require.Len(t, jar.Cookies(u.URL), 1)
	code, out = do(http.MethodGet, "/api/me", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "viewer", out["name"])
	require.Equal(t, "viewer", out["role"])
	code, _ = do(http.MethodGet, "/api/skills", "")
	require.Equal(t, http.StatusOK, code, "a viewer reads")
	code, out = do(http.MethodPost, "/api/plans/00000000-0000-4000-8000-000000000001/tools/g/approve", `{"by":"someone else","reason":"forced"}`)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "approve needs the game master role or operator; viewer is a viewer", out["error"])
	code, out = do(http.MethodPost, "/api/sessions/s1/reset", "")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, out["error"], "reset needs the operator role")

	// A state change the console does not list needs an operator, and its
	// path never becomes a subject token.
	code, out = do(http.MethodPost, "/api/sessions/a.b.>/x", "")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, out["error"], "other needs the operator role")
	code, out = do(http.MethodGet, "/api/audit", "")
	require.Equal(t, http.StatusOK, code, out)
	entries := out["entries"].([]any)
	require.GreaterOrEqual(t, len(entries), 4)
	other := entries[0].(map[string]any)
	require.Equal(t, "other", other["action"])
	require.Equal(t, "/api/sessions/a.b.>/x", other["path"])
	require.Equal(t, "reset", entries[1].(map[string]any)["action"])
	approve := entries[2].(map[string]any)
	require.Equal(t, "approve", approve["action"])
	require.Equal(t, "viewer", approve["user"], "the signed-in user, not the body's by")
	require.Equal(t, "refused", approve["outcome"])
	last := entries[len(entries)-1].(map[string]any)
	require.Equal(t, "login", last["action"])
	require.Equal(t, "ok", last["outcome"], "a refused login is not an action: it is counted with its address's minute")
	require.Equal(t, "viewer", last["user"])
	// Paging: one at a time, newest first, down to the first entry.
	code, out = do(http.MethodGet, "/api/audit?limit=1", "")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, out["entries"], 1)
	code, out = do(http.MethodGet, "/api/audit?limit=2&before="+jsonNum(out["next"]), "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "reset", out["entries"].([]any)[0].(map[string]any)["action"])
	require.Equal(t, "approve", out["entries"].([]any)[1].(map[string]any)["action"])
	// Another console (or this one restarted) reads the same trail.
	cs2, err := New(srv.NC, Options{Users: testUsers()})
	require.NoError(t, err)
	web2 := httptest.NewServer(cs2.Handler())
	t.Cleanup(web2.Close)
	req2, _ := http.NewRequest(http.MethodGet, web2.URL+"/api/audit?limit=200", nil)
	resp2, err := http.DefaultClient.Do(authed(req2))
	require.NoError(t, err)
	b2, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	require.Equal(t, http.StatusOK, resp2.StatusCode)
	require.Contains(t, string(b2), `"action":"approve"`, "entries written before this console started")
	st, err := srv.JS.Stream(t.Context(), messages.StreamAudit)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), "narratoria.audit.approve")
	require.NoError(t, err)
	require.Contains(t, string(m.Data), `"user":"viewer"`)

	checkRefusedLoginListed(t, cs, do)

	code, _ = do(http.MethodPost, "/api/logout", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = do(http.MethodGet, "/api/me", "")
	require.Equal(t, http.StatusUnauthorized, code, "logged out")
	// A bearer token: wrong is 401, right signs in.
	req, _ := http.NewRequest(http.MethodGet, web.URL+"/api/me", nil)
	req.Header.Set("Authorization", "Bearer nrt_wrong")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req, _ = http.NewRequest(http.MethodGet, web.URL+"/api/me", nil)
	resp, err = http.DefaultClient.Do(authed(req))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(b), `"role":"operator"`)
}

// checkRefusedLoginListed: the refused login of TestLoginsAndRoles is
// counted in its address's minute, written when the minute is over (here:
// when the console closes) and listed with ?kind=logins.
func checkRefusedLoginListed(t *testing.T, cs *Console, do func(method, path, body string) (int, map[string]any)) {
	t.Helper()
	cs.Close()
	code, out := do(http.MethodGet, "/api/audit?kind=logins", "")
	require.Equal(t, http.StatusOK, code, out)
	require.Len(t, out["entries"], 1)
	refused := out["entries"].([]any)[0].(map[string]any)
	require.Equal(t, "login", refused["action"])
	require.Equal(t, "refused", refused["outcome"])
	require.Equal(t, "viewer", refused["user"])
	require.Equal(t, "127.0.0.1", refused["remote"])
	require.EqualValues(t, 1, refused["count"])
	code, _ = do(http.MethodGet, "/api/audit?kind=everything", "")
	require.Equal(t, http.StatusBadRequest, code)
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
