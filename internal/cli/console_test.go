package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/console"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

// TestHashPassword: the printed entry, pasted under console.users, loads
// and its hash is the password's; --token prints a token once and the
// entry holds its hash only; a short password and a bad role are refused.
func TestHashPassword(t *testing.T) {
	code, out, errOut := run(t, "a long enough secret\n", "console", "hash-password", "--name", "gm", "--role", "game master")
	require.Equal(t, 0, code, errOut)
	code, tokOut, errOut := run(t, "", "console", "hash-password", "--token", "--name", "bot", "--role", "viewer")
	require.Equal(t, 0, code, errOut)
	token := regexp.MustCompile(`token \(shown once[^)]*\): (\S+)`).FindStringSubmatch(tokOut)
	require.Len(t, token, 2, tokOut)
	indent := func(s string) string { return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") + "\n" }
	path := filepath.Join(t.TempDir(), "narratoria.yaml")
	require.NoError(t, os.WriteFile(path, []byte("console:\n  users:\n"+indent(out)+indent(tokOut)), 0o644))
	cfg, err := config.Load(path, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	users, proxy, err := cfg.Console.Options()
	require.NoError(t, err)
	require.Nil(t, proxy)
	require.Len(t, users, 2)
	require.Equal(t, console.User{Name: "gm", Role: console.RoleGameMaster, PasswordHash: users[0].PasswordHash}, users[0])
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(users[0].PasswordHash), []byte("a long enough secret")))
	require.Equal(t, console.TokenHashOf(token[1]), users[1].TokenHash)
	require.NotContains(t, indent(tokOut)[strings.Index(indent(tokOut), "- name"):], token[1], "the entry holds the hash, not the token")

	code, _, errOut = run(t, "short\n", "console", "hash-password")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "at least 8 characters")
	code, _, errOut = run(t, "", "console", "hash-password", "--token", "--role", "king")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--role")
}

// TestConsoleSectionErrorsNameTheKey: a mistake in the console: section
// stops the load with the key at fault.
func TestConsoleSectionErrorsNameTheKey(t *testing.T) {
	for body, want := range map[string]string{
		"console:\n  users:\n    - {name: a, role: king, passwordHash: x}\n":                     "console.users[0].role",
		"console:\n  users:\n    - {name: a, role: viewer, passwordHash: plain}\n":               "console.users[0] (a): passwordHash is not a bcrypt hash",
		"console:\n  users:\n    - {name: a, role: viewer}\n":                                    "needs passwordHash or tokenHash",
		"console:\n  trustedProxy: {userHeader: X-Forwarded-User}\n":                             "console.trustedProxy.sources",
		"console:\n  trustedProxy: {sources: [not-an-ip], userHeader: X-Forwarded-User}\n":       "console.trustedProxy.sources[0]",
		"console:\n  trustedProxy: {sources: [10.0.0.0/8], roles: {bob: king}, userHeader: X}\n": "console.trustedProxy.roles.bob",
	} {
		path := filepath.Join(t.TempDir(), "narratoria.yaml")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		_, err := config.Load(path, func(string) (string, bool) { return "", false })
		require.ErrorContains(t, err, want, body)
	}
}

// TestUpLogin: with no console users configured, up's first start makes
// an operator login with a random password, stored hashed, the password
// in a file only its owner reads; the next start reads the same login
// and shows no password.
func TestUpLogin(t *testing.T) {
	dir := t.TempDir()
	u, password, created, err := upLogin(dir)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, console.RoleOperator, u.Role)
	require.GreaterOrEqual(t, len(password), 16)
	loginFile, passwordFile := upLoginFiles(dir)
	for _, f := range []string{loginFile, passwordFile} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
	b, err := os.ReadFile(passwordFile)
	require.NoError(t, err)
	require.Equal(t, password, strings.TrimSpace(string(b)))
	stored, err := os.ReadFile(loginFile)
	require.NoError(t, err)
	require.NotContains(t, string(stored), password, "stored hashed")
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)))
	again, p2, created, err := upLogin(dir)
	require.NoError(t, err)
	require.False(t, created)
	require.Empty(t, p2)
	require.Equal(t, u, again)
}

// lockedBuffer is a bytes.Buffer safe to read while a command writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveConsoleCmd runs `narratoria console` with args against a fresh NATS
// server until the test ends and returns its URL and output.
func serveConsoleCmd(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	url, out, _ := serveConsoleCmdErr(t, args...)
	return url, out
}

// serveConsoleCmdErr is serveConsoleCmd, also returning what the command
// wrote on stderr.
func serveConsoleCmdErr(t *testing.T, args ...string) (string, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	out, errb := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		root := NewRoot(Streams{In: strings.NewReader(""), Out: out, Err: errb})
		root.SetArgs(append([]string{"console", "--nats-url", srv.URL(), "--listen", "127.0.0.1:0"}, args...))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Log(err, errb.String())
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	var url string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`console: (https?://\S+/)`).FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, testlog.Budget(20*time.Second), 20*time.Millisecond, "the console starts")
	return url, out, errb
}

// TestConsoleCommandLogins: `narratoria console --config` takes its logins
// from the console: section (a token signs in with its role; nothing else
// does); without any it makes an operator for the run and prints its
// password once.
func TestConsoleCommandLogins(t *testing.T) {
	token, hash := console.NewToken()
	path := filepath.Join(t.TempDir(), "narratoria.yaml")
	require.NoError(t, os.WriteFile(path, []byte("console:\n  users:\n    - {name: bot, role: viewer, tokenHash: \""+hash+"\"}\n"), 0o644))
	me := func(url, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url+"api/me", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	url, out := serveConsoleCmd(t, "--config", path)
	code, _ := me(url, "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := me(url, token)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"name":"bot","role":"viewer","via":"token"}`, body)
	require.NotContains(t, out.String(), "password")

	url, out = serveConsoleCmd(t)
	m := regexp.MustCompile(`sign in as admin with password (\S+)`).FindStringSubmatch(out.String())
	require.Len(t, m, 2, out.String())
	login, _ := json.Marshal(map[string]string{"name": "admin", "password": m[1]})
	resp, err := http.Post(url+"api/login", "application/json", bytes.NewReader(login))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// testCertificate writes a self-signed certificate for 127.0.0.1 and
// localhost and its key under dir, and returns their paths and a pool
// that trusts it.
func testCertificate(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "narratoria console test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "console.crt"), filepath.Join(dir, "console.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestConsoleServesHTTPS: with console.tlsCert and tlsKey in the
// configuration, or --https-cert and --https-key, `narratoria console`
// serves HTTPS only: a login over it sets a Secure, HttpOnly, SameSite=Strict
// cookie that signs the next request in; plain HTTP on the same port gets
// no page. Listening on every interface over TLS is not warned about.
func TestConsoleServesHTTPS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := testCertificate(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("a long enough secret"), bcrypt.MinCost)
	require.NoError(t, err)
	users := "console:\n  users:\n    - {name: gm, role: gamemaster, passwordHash: \"" + string(hash) + "\"}\n"
	withTLS := filepath.Join(dir, "tls.yaml")
	require.NoError(t, os.WriteFile(withTLS, []byte(users+"  tlsCert: "+certFile+"\n  tlsKey: "+keyFile+"\n"), 0o644))
	plain := filepath.Join(dir, "plain.yaml")
	require.NoError(t, os.WriteFile(plain, []byte(users), 0o644))
	for name, args := range map[string][]string{
		"configuration": {"--config", withTLS},
		"flags":         {"--config", plain, "--https-cert", certFile, "--https-key", keyFile},
	} {
		t.Run(name, func(t *testing.T) {
			url, _, errb := serveConsoleCmdErr(t, append(args, "--listen", "0.0.0.0:0")...)
			require.True(t, strings.HasPrefix(url, "https://"), url)
			_, port, err := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(url, "https://"), "/"))
			require.NoError(t, err)
			url = "https://127.0.0.1:" + port + "/"
			jar, _ := cookiejar.New(nil)
			hc := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			resp, err := hc.Post(url+"api/login", "application/json", strings.NewReader(`{"name":"gm","password":"a long enough secret"}`))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Len(t, resp.Cookies(), 1)
			c := resp.Cookies()[0]
			require.True(t, c.Secure && c.HttpOnly && c.SameSite == http.SameSiteStrictMode, "%+v", c)
			require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
			resp, err = hc.Get(url + "api/me")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "the cookie signs in over HTTPS")
			resp, err = http.Get(strings.Replace(url, "https://", "http://", 1) + "api/me")
			if err == nil {
				resp.Body.Close()
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP gets no page")
			}
			require.NotContains(t, errb.String(), "WARNING")
		})
	}
	// A key without its certificate is named.
	half := filepath.Join(dir, "half.yaml")
	require.NoError(t, os.WriteFile(half, []byte(users+"  tlsKey: "+keyFile+"\n"), 0o644))
	code, _, errOut := run(t, "", "console", "--config", half, "--nats-url", "nats://127.0.0.1:1")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "console.tlsCert and console.tlsKey")
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(users+"  tlsCert: "+keyFile+"\n  tlsKey: "+keyFile+"\n"), 0o644))
	code, _, errOut = run(t, "", "console", "--config", bad, "--nats-url", "nats://127.0.0.1:1")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "console.tlsCert, console.tlsKey")
}

// TestConsoleWarnsOnPlainHTTP: `narratoria console` listening on every
// interface over plain HTTP logs a warning and prints one on stderr; on
// loopback it does not.
func TestConsoleWarnsOnPlainHTTP(t *testing.T) {
	_, _, errb := serveConsoleCmdErr(t, "--listen", "0.0.0.0:0")
	require.Eventually(t, func() bool {
		return strings.Contains(errb.String(), "WARNING: console: serving plain HTTP on") && strings.Contains(errb.String(), "(every interface)")
	},
		testlog.Budget(5*time.Second), 10*time.Millisecond, errb.String())
	require.Contains(t, errb.String(), "level=WARN", "logged too")
	_, _, errb = serveConsoleCmdErr(t)
	require.NotContains(t, errb.String(), "plain HTTP")
}
