package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/narratoria/runtime/internal/natstest"
)

// clock is a settable clock for the throttle and the login tally.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// guarded is a console on a real NATS server whose password checks are
// counted (and slowed, so concurrent guesses overlap), on a settable
// clock, with its metrics on reg.
type guardedConsole struct {
	cs     *Console
	clk    *clock
	checks atomic.Int64
	reg    *prometheus.Registry
}

func newGuardedConsole(t *testing.T, o Options) *guardedConsole {
	t.Helper()
	return guardedConsoleOn(t, natstest.Start(t), o)
}

// guardedConsoleOn is newGuardedConsole on a server of the test's.
func guardedConsoleOn(t *testing.T, srv *natstest.Server, o Options) *guardedConsole {
	t.Helper()
	g := &guardedConsole{clk: newClock(), reg: prometheus.NewRegistry()}
	o.Users, o.Registerer = testUsers(), g.reg
	cs, err := New(srv.NC, o)
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	cs.auth.compare = func(hash, password []byte) error {
		g.checks.Add(1)
		time.Sleep(20 * time.Millisecond)
		return bcrypt.CompareHashAndPassword(hash, password)
	}
	cs.auth.limit.now, cs.logins.now = g.clk.now, g.clk.now
	g.cs = cs
	return g
}

// login posts a login for name from remote to the handler and returns the
// status and the Retry-After header.
func (g *guardedConsole) login(name, password, remote string, headers ...string) (int, string) {
	r := httptest.NewRequest(http.MethodPost, "/api/login", strings.NewReader(`{"name":"`+name+`","password":"`+password+`"}`))
	r.RemoteAddr, r.Host = remote, "127.0.0.1:7420"
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	g.cs.Handler().ServeHTTP(w, r)
	return w.Code, w.Header().Get("Retry-After")
}

// TestConcurrentGuessesReserveBeforeTheCheck: 60 guesses at one account
// sent at once over HTTP, from 60 addresses (a trusted proxy forwards
// them), make at most loginFailuresMax password checks: each reserves its
// attempt before its check, under one lock. The rest are 429 and never
// reach bcrypt.
func TestConcurrentGuessesReserveBeforeTheCheck(t *testing.T) {
	g := newGuardedConsole(t, Options{TrustedProxy: &TrustedProxy{Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	web := httptest.NewServer(g.cs.Handler())
	t.Cleanup(web.Close)
	start := make(chan struct{})
	codes := make(chan int, 60)
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, web.URL+"/api/login", strings.NewReader(`{"name":"gm","password":"guess `+fmt.Sprint(i)+`"}`))
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
			<-start
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	t.Logf("60 concurrent guesses: %d password checks, statuses %v", g.checks.Load(), got)
	require.LessOrEqual(t, g.checks.Load(), int64(loginFailuresMax), "password checks")
	require.Equal(t, int(g.checks.Load()), got[http.StatusUnauthorized])
	require.Equal(t, 60-got[http.StatusUnauthorized], got[http.StatusTooManyRequests])
	require.EqualValues(t, g.checks.Load(), testutil.ToFloat64(g.cs.m.passwordChecks))
	require.EqualValues(t, got[http.StatusTooManyRequests], testutil.ToFloat64(g.cs.m.throttled.WithLabelValues(scopeAccount)))
}

// TestRotatingAddressesMeetTheAccountLimit: 300 guesses at one account,
// each from another address (the peer itself, no proxy), reach the check
// loginFailuresMax times; the other 290 are refused unchecked, even the
// right password, until the back-off ends. Another account still signs in
// from a fresh address.
func TestRotatingAddressesMeetTheAccountLimit(t *testing.T) {
	g := newGuardedConsole(t, Options{})
	got := map[int]int{}
	for i := range 300 {
		code, _ := g.login("gm", fmt.Sprintf("guess %d", i), fmt.Sprintf("203.0.%d.%d:4000", i/250, i%250+1))
		got[code]++
	}
	t.Logf("300 guesses from rotating addresses: %d password checks, statuses %v", g.checks.Load(), got)
	require.Equal(t, map[int]int{http.StatusUnauthorized: loginFailuresMax, http.StatusTooManyRequests: 300 - loginFailuresMax}, got)
	require.EqualValues(t, loginFailuresMax, g.checks.Load())
	code, retry := g.login("gm", testPassword, "192.0.2.200:1")
	require.Equal(t, http.StatusTooManyRequests, code, "the account waits, whoever asks")
	require.Equal(t, "31", retry)
	code, _ = g.login("viewer", testPassword, "192.0.2.201:1")
	require.Equal(t, http.StatusOK, code)
}

// TestAddressLimitAcrossAccounts: one address guessing at many accounts
// is refused after loginFailuresMax failures, whatever account it names
// next; another address is not.
func TestAddressLimitAcrossAccounts(t *testing.T) {
	g := newGuardedConsole(t, Options{})
	for i := range loginFailuresMax {
		code, _ := g.login(fmt.Sprintf("user%d", i), "guess", "192.0.2.1:1000")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _ := g.login("viewer", testPassword, "192.0.2.1:1001")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.EqualValues(t, 1, testutil.ToFloat64(g.cs.m.throttled.WithLabelValues(scopeAddress)))
	code, _ = g.login("viewer", testPassword, "192.0.2.2:1000")
	require.Equal(t, http.StatusOK, code)
	// An IPv6 host counts by its /64: rotating the rest does not help.
	for i := range loginFailuresMax {
		code, _ := g.login(fmt.Sprintf("v6user%d", i), "guess", fmt.Sprintf("[2001:db8:1:2::%x]:1", i+1))
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _ = g.login("viewer", testPassword, "[2001:db8:1:2:ffff::1]:1")
	require.Equal(t, http.StatusTooManyRequests, code)
}

// TestBackoffDoubles: past the limit an account waits 30 s, then one
// attempt; each further failure doubles the wait; the right password
// after a wait signs in and clears the account's failures.
func TestBackoffDoubles(t *testing.T) {
	g := newGuardedConsole(t, Options{})
	addr := func(i int) string { return fmt.Sprintf("198.51.100.%d:1", i+1) }
	for i := range loginFailuresMax {
		code, _ := g.login("gm", "guess", addr(i))
		require.Equal(t, http.StatusUnauthorized, code)
	}
	wait := loginBackoffBase
	for round := range 3 {
		g.clk.add(wait - time.Second)
		code, _ := g.login("gm", testPassword, addr(20+round))
		require.Equal(t, http.StatusTooManyRequests, code, "round %d: still waiting", round)
		g.clk.add(2 * time.Second)
		code, _ = g.login("gm", "guess", addr(30+round))
		require.Equal(t, http.StatusUnauthorized, code, "round %d: one attempt after the wait", round)
		code, retry := g.login("gm", testPassword, addr(40+round))
		require.Equal(t, http.StatusTooManyRequests, code, "round %d", round)
		wait *= 2
		require.Equal(t, fmt.Sprint(int(wait.Seconds())+1), retry, "round %d: the wait doubled", round)
	}
	g.clk.add(wait + time.Second)
	code, _ := g.login("gm", testPassword, addr(50))
	require.Equal(t, http.StatusOK, code)
	code, _ = g.login("gm", "guess", addr(51))
	require.Equal(t, http.StatusUnauthorized, code, "a success cleared the account's failures")
	code, _ = g.login("gm", testPassword, addr(52))
	require.Equal(t, http.StatusOK, code)
}

// TestForwardedForOnlyFromTheTrustedProxy: X-Forwarded-For names the
// client only on requests from the trusted proxy; from anywhere else a
// guesser rotating the header is throttled as the peer it is.
func TestForwardedForOnlyFromTheTrustedProxy(t *testing.T) {
	g := newGuardedConsole(t, Options{TrustedProxy: &TrustedProxy{Sources: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}}})
	for i := range loginFailuresMax {
		code, _ := g.login(fmt.Sprintf("user%d", i), "guess", "192.0.2.9:1", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _ := g.login("viewer", testPassword, "192.0.2.9:1", "X-Forwarded-For", "198.51.100.99")
	require.Equal(t, http.StatusTooManyRequests, code, "the header from an untrusted peer is ignored")
	// Through the proxy each client counts as itself, and a hop the client
	// wrote before the proxy's is not believed.
	for i := range loginFailuresMax {
		code, _ := g.login(fmt.Sprintf("user%d", i), "guess", "10.0.0.1:1", "X-Forwarded-For", "198.51.100.1, 203.0.113.7")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _ = g.login("viewer", testPassword, "10.0.0.1:1", "X-Forwarded-For", "198.51.100.2, 203.0.113.7")
	require.Equal(t, http.StatusTooManyRequests, code, "203.0.113.7, what the proxy saw, is throttled")
	code, _ = g.login("viewer", testPassword, "10.0.0.1:1", "X-Forwarded-For", "203.0.113.8")
	require.Equal(t, http.StatusOK, code)
}

// FuzzClientAddr: whatever X-Forwarded-For and X-Forwarded-Proto a client
// sends, from a peer that is not the trusted proxy they change nothing;
// through the proxy the address is the peer's or an address the header
// holds (never one of the proxy's own), and nothing panics.
func FuzzClientAddr(f *testing.F) {
	for _, s := range []string{"", "198.51.100.7", "198.51.100.7, 10.0.0.1", "garbage, 203.0.113.9", "[2001:db8::1]", ",,,", "10.0.0.2"} {
		f.Add(s, "https")
	}
	p := &TrustedProxy{Sources: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	f.Fuzz(func(t *testing.T, xff, proto string) {
		for _, peer := range []string{"10.0.0.1:4000", "192.0.2.1:4000"} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = peer
			r.Header.Set("X-Forwarded-For", xff)
			r.Header.Set("X-Forwarded-Proto", proto)
			got := p.clientAddr(r)
			if peer == "192.0.2.1:4000" {
				require.Equal(t, "192.0.2.1", got)
				require.False(t, p.https(r))
				continue
			}
			if got == "10.0.0.1" {
				continue
			}
			ip, err := netip.ParseAddr(got)
			require.NoError(t, err, got)
			require.False(t, p.contains(ip), got)
			found := false
			for _, hop := range strings.Split(xff, ",") {
				if a, err := netip.ParseAddr(strings.Trim(strings.TrimSpace(hop), "[]")); err == nil && a.Unmap().String() == got {
					found = true
				}
			}
			require.True(t, found, "%s is one of %q", got, xff)
		}
	})
}
