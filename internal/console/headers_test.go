package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
)

// TestSecurityHeadersOnEveryRoute: every route of the console, and every
// refusal in front of them (unknown host, cross-origin state change, no
// login, no such path), answers with the Content Security Policy (no
// inline script, frame-ancestors 'none'), X-Frame-Options: DENY,
// X-Content-Type-Options: nosniff and Referrer-Policy: no-referrer; an
// asset with its own sandboxing policy, also unframeable.
func TestSecurityHeadersOnEveryRoute(t *testing.T) {
	// No scheduler runs: an approval waits DecisionWait, then is refused
	// (its headers are what this test reads).
	srv := natstest.Start(t)
	cs, err := New(srv.NC, Options{Users: testUsers(), DecisionWait: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	plan, asset := "00000000-0000-4000-8000-000000000001", "sha256-"+strings.Repeat("ab", 32)
	type req struct {
		method, path string
		headers      map[string]string
		anonymous    bool
	}
	reqs := []req{
		{method: "GET", path: "/"}, {method: "GET", path: "/app.js"}, {method: "GET", path: "/app.css"}, {method: "GET", path: "/index.html"},
		{method: "GET", path: "/api/plans"}, {method: "GET", path: "/api/plans/" + plan}, {method: "GET", path: "/api/results/" + plan},
		{method: "GET", path: "/api/skills"}, {method: "GET", path: "/api/assets/" + asset}, {method: "GET", path: "/api/history"},
		{method: "GET", path: "/api/results/" + plan + "/inputs"}, {method: "GET", path: "/api/sessions/s1/narrations"},
		{method: "GET", path: "/api/events?session=s1"}, {method: "GET", path: "/api/me"}, {method: "GET", path: "/api/audit"},
		{method: "GET", path: "/api/audit?kind=logins"},
		{method: "POST", path: "/api/login", anonymous: true}, {method: "POST", path: "/api/logout"},
		// refusals in front of the routes
		{method: "GET", path: "/api/me", anonymous: true},
		{method: "GET", path: "/api/me", headers: map[string]string{"Host": "rebind.attacker.example"}},
		{method: "POST", path: "/api/prompt", headers: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{method: "GET", path: "/no/such/page"},
	}
	// Every state-changing route the console guards.
	for pattern := range guards {
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("{plan}", plan, "{tool}", "t", "{session}", "s1").Replace(path)
		reqs = append(reqs, req{method: method, path: path})
	}
	for _, rq := range reqs {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		r, _ := http.NewRequestWithContext(ctx, rq.method, web.URL+rq.path, strings.NewReader("{}"))
		for k, v := range rq.headers {
			if k == "Host" {
				r.Host = v
			}
			r.Header.Set(k, v)
		}
		if !rq.anonymous {
			authed(r)
		}
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err, "%s %s", rq.method, rq.path)
		resp.Body.Close()
		cancel()
		h := resp.Header
		what := rq.method + " " + rq.path + " (" + resp.Status + ")"
		wantCSP := pageCSP
		if strings.HasPrefix(rq.path, "/api/assets/") && resp.StatusCode == http.StatusOK {
			wantCSP = assetCSP
		}
		require.Equal(t, wantCSP, h.Get("Content-Security-Policy"), what)
		require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'", what)
		require.NotContains(t, h.Get("Content-Security-Policy"), "script-src 'unsafe-inline'", what)
		require.Equal(t, "DENY", h.Get("X-Frame-Options"), what)
		require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), what)
		require.Equal(t, "no-referrer", h.Get("Referrer-Policy"), what)
		t.Logf("%s: headers set", what)
	}
}

// TestSessionCookieFlags: the session cookie is always HttpOnly and
// SameSite=Strict; it is Secure when the console serves HTTPS, or when the
// trusted proxy says the browser came over HTTPS — and only then: the
// header from anyone else changes nothing.
func TestSessionCookieFlags(t *testing.T) {
	srv := natstest.Start(t)
	loopback := &TrustedProxy{Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	elsewhere := &TrustedProxy{Sources: []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")}}
	for _, c := range []struct {
		name       string
		tls        bool
		proxy      *TrustedProxy
		proto      string
		wantSecure bool
	}{
		{"plain HTTP", false, nil, "", false},
		{"HTTPS", true, nil, "", true},
		{"behind the trusted proxy, https", false, loopback, "https", true},
		{"behind the trusted proxy, http", false, loopback, "http", false},
		{"behind the trusted proxy, a client's https then the proxy's http", false, loopback, "https, http", false},
		{"an untrusted peer saying https", false, elsewhere, "https", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs, err := New(srv.NC, Options{Users: testUsers(), TrustedProxy: c.proxy})
			require.NoError(t, err)
			t.Cleanup(cs.Close)
			web := httptest.NewUnstartedServer(cs.Handler())
			if c.tls {
				web.StartTLS()
			} else {
				web.Start()
			}
			t.Cleanup(web.Close)
			hc := web.Client()
			for _, path := range []string{"/api/login", "/api/logout"} {
				r, _ := http.NewRequest(http.MethodPost, web.URL+path, strings.NewReader(`{"name":"gm","password":"`+testPassword+`"}`))
				if c.proto != "" {
					r.Header.Set("X-Forwarded-Proto", c.proto)
				}
				resp, err := hc.Do(r)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode, path)
				cookies := resp.Cookies()
				require.Len(t, cookies, 1, path)
				require.True(t, cookies[0].HttpOnly, path)
				require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite, path)
				require.Equal(t, c.wantSecure, cookies[0].Secure, path)
			}
		})
	}
}

// TestPlainHTTPWarning: plain HTTP on any address but loopback is warned
// about.
func TestPlainHTTPWarning(t *testing.T) {
	for addr, warn := range map[string]bool{
		"127.0.0.1:7420": false, "[::1]:7420": false, "localhost:7420": false, "127.0.0.2:1": false,
		"0.0.0.0:7420": true, "[::]:7420": true, ":7420": true, "192.168.1.20:7420": true, "[2001:db8::1]:80": true, "console.example.org:80": true,
	} {
		got := PlainHTTPWarning(addr)
		require.Equal(t, warn, got != "", "%s: %q", addr, got)
		if warn {
			require.Contains(t, got, "unencrypted", addr)
		}
	}
}
