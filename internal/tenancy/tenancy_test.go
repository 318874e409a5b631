package tenancy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const prefix = "narratoria"

// newAuthority opens an authority in a temporary directory with the given tenants.
func newAuthority(t *testing.T, tenants map[string]Limits) *Authority {
	t.Helper()
	a, err := Open(filepath.Join(t.TempDir(), "auth"), prefix)
	require.NoError(t, err)
	for name, l := range tenants {
		_, err := a.AddTenant(name, l)
		require.NoError(t, err)
	}
	return a
}

// startServer starts an in-process JetStream server configured by a.
func startServer(t *testing.T, a *Authority) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	require.NoError(t, a.Configure(opts))
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	require.True(t, s.ReadyForConnections(10*time.Second), "server not ready")
	return s
}

// connect connects with a creds file; the connection is closed at cleanup.
func connect(t *testing.T, s *server.Server, creds string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := dial(s, creds, extra...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func dial(s *server.Server, creds string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.UserCredentials(creds), nats.NoReconnect(), nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, extra...)
	return nats.Connect(s.ClientURL(), opts...)
}

// echo makes the SVC connection reply to every request on subject with the
// subject it arrived on.
func echo(t *testing.T, svc *nats.Conn, subject string) {
	t.Helper()
	_, err := svc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(m.Subject)) })
	require.NoError(t, err)
	require.NoError(t, svc.Flush())
}

func request(nc *nats.Conn, subject string) (string, error) {
	m, err := nc.Request(subject, []byte("hi"), 2*time.Second)
	if err != nil {
		return "", err
	}
	return string(m.Data), nil
}

func push(t *testing.T, s *server.Server, a *Authority, name string) {
	t.Helper()
	sys := connect(t, s, a.SystemCreds())
	j, err := a.AccountJWT(name)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, Push(ctx, sys, j))
	sys.Close()
}

func TestServiceImportRenamesSubjectAndRepliesFlowBack(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}, "globex": {}})
	s := startServer(t, a)
	svc := connect(t, s, a.ServiceCreds())
	echo(t, svc, prefix+".prompts.*.*")
	echo(t, svc, prefix+".narrate.*")
	echo(t, svc, prefix+".sessions.*.*.reset")
	echo(t, svc, prefix+".approvals.*.*.*")
	echo(t, svc, prefix+".control.*.>")

	for _, tenant := range []string{"acme", "globex"} {
		nc := connect(t, s, filepath.Join(a.Dir(), "tenants", tenant+".creds"))
		for local, remote := range map[string]string{
			"prompts.s1":         "prompts." + tenant + ".s1",
			"narrate":            "narrate." + tenant,
			"sessions.s1.reset":  "sessions." + tenant + ".s1.reset",
			"approvals.s1.a1":    "approvals." + tenant + ".s1.a1",
			"control.pause.now":  "control." + tenant + ".pause.now",
			"control.skills.add": "control." + tenant + ".skills.add",
		} {
			got, err := request(nc, prefix+"."+local)
			require.NoError(t, err, "%s: %s", tenant, local)
			require.Equal(t, prefix+"."+remote, got, "%s: %s", tenant, local)
		}
	}
}

func TestJetStreamPublishThroughImportGetsPubAck(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}})
	s := startServer(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	svc := connect(t, s, a.ServiceCreds())
	sjs, err := jetstream.New(svc)
	require.NoError(t, err)
	st, err := sjs.CreateStream(ctx, jetstream.StreamConfig{Name: "PROMPTS", Subjects: []string{prefix + ".prompts.*.*"}})
	require.NoError(t, err)

	acme := connect(t, s, filepath.Join(a.Dir(), "tenants", "acme.creds"))
	ajs, err := jetstream.New(acme)
	require.NoError(t, err)
	ack, err := ajs.Publish(ctx, prefix+".prompts.s1", []byte("prompt"))
	require.NoError(t, err)
	require.Equal(t, "PROMPTS", ack.Stream)

	m, err := st.GetLastMsgForSubject(ctx, prefix+".prompts.acme.s1")
	require.NoError(t, err)
	require.Equal(t, "prompt", string(m.Data))
	require.Equal(t, ack.Sequence, m.Sequence)
}

// collect subscribes and gathers subjects of the messages received.
type collector struct {
	mu   sync.Mutex
	subs []string
}

func (c *collector) add(m *nats.Msg) {
	c.mu.Lock()
	c.subs = append(c.subs, m.Subject)
	c.mu.Unlock()
}

func (c *collector) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.subs...)
}

func subscribe(t *testing.T, nc *nats.Conn, subject string) *collector {
	t.Helper()
	c := &collector{}
	_, err := nc.Subscribe(subject, c.add)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return c
}

func TestStreamImportsReachOnlyTheirTenant(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}, "globex": {}})
	s := startServer(t, a)
	svc := connect(t, s, a.ServiceCreds())
	acme := connect(t, s, filepath.Join(a.Dir(), "tenants", "acme.creds"))
	globex := connect(t, s, filepath.Join(a.Dir(), "tenants", "globex.creds"))

	for _, kind := range streamKinds {
		acmeGot := subscribe(t, acme, prefix+"."+kind+".>")
		globexGot := subscribe(t, globex, prefix+"."+kind+".>")
		require.NoError(t, svc.Publish(prefix+"."+kind+".acme.s1", []byte("x")))
		require.NoError(t, svc.Flush())
		require.Eventually(t, func() bool { return len(acmeGot.get()) == 1 }, 2*time.Second, 10*time.Millisecond, kind)
		require.Equal(t, []string{prefix + "." + kind + ".s1"}, acmeGot.get(), kind)
		require.NoError(t, globex.Flush())
		time.Sleep(50 * time.Millisecond)
		require.Empty(t, globexGot.get(), kind)
	}
}

func TestTenantsCannotReachEachOther(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}, "globex": {}})
	s := startServer(t, a)
	svc := connect(t, s, a.ServiceCreds())
	acme := connect(t, s, filepath.Join(a.Dir(), "tenants", "acme.creds"))
	globex := connect(t, s, filepath.Join(a.Dir(), "tenants", "globex.creds"))

	// globex listens everywhere, including on acme's SVC-side subjects.
	globexAll := subscribe(t, globex, ">")
	globexAcme := subscribe(t, globex, prefix+".narrations.acme.>")
	acmeGot := subscribe(t, acme, prefix+".narrations.>")
	svcGot := subscribe(t, svc, prefix+".>")

	// SVC publishes acme's narrations and events; acme's own publishes go to SVC.
	require.NoError(t, svc.Publish(prefix+".narrations.acme.s1", []byte("secret")))
	require.NoError(t, svc.Publish(prefix+".events.acme.s1", []byte("secret")))
	require.NoError(t, acme.Publish(prefix+".prompts.s1", []byte("secret")))
	require.NoError(t, acme.Flush())
	require.NoError(t, svc.Flush())
	require.Eventually(t, func() bool { return len(acmeGot.get()) == 1 }, 2*time.Second, 10*time.Millisecond)

	// globex tries acme's subjects from its side.
	for _, subj := range []string{
		prefix + ".prompts.acme.s1",
		prefix + ".narrate.acme",
		prefix + ".control.acme.x",
		prefix + ".narrations.acme.s1",
	} {
		require.NoError(t, globex.Publish(subj, []byte("attack")))
	}
	require.NoError(t, globex.Flush())
	time.Sleep(100 * time.Millisecond)

	for _, subj := range globexAll.get() {
		// globex sees only its own publishes, never acme's traffic.
		require.NotContains(t, []string{prefix + ".narrations.s1", prefix + ".events.s1", prefix + ".prompts.s1"}, subj)
	}
	// A tenant's user publishes only the game role's subjects: of the 4,
	// prompts.acme.s1 (a prompt's subject names one session token),
	// narrate.acme and narrations.acme.s1 are refused by the server.
	require.Len(t, globexAll.get(), 1, "globex's > sees its own allowed publish: %v", globexAll.get())
	require.Empty(t, globexAcme.get(), "globex may not publish on narrations.acme.s1: %v", globexAcme.get())
	require.Equal(t, []string{prefix + ".narrations.s1"}, acmeGot.get(), "globex's publish reached acme")

	var fromGlobex []string
	for _, subj := range svcGot.get() {
		tok := strings.Split(subj, ".")
		require.GreaterOrEqual(t, len(tok), 3)
		if tok[2] == "globex" {
			fromGlobex = append(fromGlobex, subj)
		}
	}
	// globex's control.acme.x is imported as control.globex.acme.x: still globex's.
	require.Equal(t, []string{prefix + ".control.globex.acme.x"}, fromGlobex)
	require.Contains(t, svcGot.get(), prefix+".prompts.acme.s1")
	for _, subj := range svcGot.get() {
		if strings.HasPrefix(subj, prefix+".prompts.acme.") || strings.HasPrefix(subj, prefix+".narrate.acme") || strings.HasPrefix(subj, prefix+".control.acme.") {
			require.Equal(t, prefix+".prompts.acme.s1", subj, "globex reached an acme SVC subject")
		}
	}
}

func TestTenantAddedWhileRunningWorksAtOnce(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}})
	s := startServer(t, a)
	svc := connect(t, s, a.ServiceCreds())
	echo(t, svc, prefix+".prompts.*.*")

	creds, err := a.AddTenant("initech", Limits{MaxConnections: 5})
	require.NoError(t, err)
	push(t, s, a, "initech")

	nc := connect(t, s, creds)
	got, err := request(nc, prefix+".prompts.s9")
	require.NoError(t, err)
	require.Equal(t, prefix+".prompts.initech.s9", got)

	ts, err := a.Tenants()
	require.NoError(t, err)
	require.Len(t, ts, 2)
	require.Equal(t, "initech", ts[1].Name)
}

func copyFile(t *testing.T, from string) string {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	to := filepath.Join(t.TempDir(), filepath.Base(from))
	require.NoError(t, os.WriteFile(to, b, 0o600))
	return to
}

func TestRevokeCutsOffTenantAndRotateReplacesCreds(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}, "globex": {}})
	s := startServer(t, a)
	svc := connect(t, s, a.ServiceCreds())
	echo(t, svc, prefix+".prompts.*.*")
	acmeCreds := filepath.Join(a.Dir(), "tenants", "acme.creds")
	oldCreds := copyFile(t, acmeCreds)

	acme := connect(t, s, acmeCreds)
	globex := connect(t, s, filepath.Join(a.Dir(), "tenants", "globex.creds"))
	_, err := request(acme, prefix+".prompts.s1")
	require.NoError(t, err)

	require.NoError(t, a.Revoke("acme"))
	push(t, s, a, "acme")
	require.Eventually(t, acme.IsClosed, 5*time.Second, 20*time.Millisecond, "revoked connection still open")
	_, err = request(acme, prefix+".prompts.s1")
	require.Error(t, err)
	_, err = dial(s, oldCreds)
	require.Error(t, err, "revoked creds accepted")
	ts, err := a.Tenants()
	require.NoError(t, err)
	require.True(t, ts[0].Revoked)
	require.False(t, ts[1].Revoked)

	got, err := request(globex, prefix+".prompts.s1")
	require.NoError(t, err)
	require.Equal(t, prefix+".prompts.globex.s1", got)

	// A removed tenant is neither rotated, added nor removed again: each
	// says so, and changes nothing. Readd brings it back with new creds;
	// the old ones stay refused.
	_, err = a.Rotate("acme")
	require.ErrorIs(t, err, ErrTenantRevoked)
	_, err = a.AddTenant("acme", Limits{})
	require.ErrorIs(t, err, ErrTenantRevoked)
	require.ErrorIs(t, a.Revoke("acme"), ErrTenantRevoked)
	require.ErrorIs(t, a.Revoke("nosuch"), ErrUnknownTenant)
	_, err = a.Rotate("nosuch")
	require.ErrorIs(t, err, ErrUnknownTenant)
	_, err = a.Readd("globex", Limits{})
	require.ErrorContains(t, err, "was not removed")
	newCreds, err := a.Readd("acme", Limits{})
	require.NoError(t, err)
	push(t, s, a, "acme")
	acme2 := connect(t, s, newCreds)
	got, err = request(acme2, prefix+".prompts.s1")
	require.NoError(t, err)
	require.Equal(t, prefix+".prompts.acme.s1", got)
	_, err = dial(s, oldCreds)
	require.Error(t, err, "creds from before the rotation accepted")
	ts, err = a.Tenants()
	require.NoError(t, err)
	require.False(t, ts[0].Revoked)

	// Rotating again cuts off the connection made with the previous creds.
	secondCreds := copyFile(t, newCreds)
	_, err = a.Rotate("acme")
	require.NoError(t, err)
	push(t, s, a, "acme")
	require.Eventually(t, acme2.IsClosed, 5*time.Second, 20*time.Millisecond, "rotated-out connection still open")
	_, err = dial(s, secondCreds)
	require.Error(t, err)
	acme3 := connect(t, s, acmeCreds)
	_, err = request(acme3, prefix+".prompts.s1")
	require.NoError(t, err)
}

func TestMaxConnectionsLimitsTenant(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {MaxConnections: 1}, "globex": {}})
	s := startServer(t, a)
	creds := filepath.Join(a.Dir(), "tenants", "acme.creds")
	connect(t, s, creds)
	nc, err := dial(s, creds)
	if err == nil {
		nc.Close()
	}
	require.Error(t, err, "second acme connection accepted")

	// globex is unlimited.
	connect(t, s, filepath.Join(a.Dir(), "tenants", "globex.creds"))
	connect(t, s, filepath.Join(a.Dir(), "tenants", "globex.creds"))

	// Raising the limit and pushing lets a second connection in.
	_, err = a.AddTenant("acme", Limits{MaxConnections: 2})
	require.NoError(t, err)
	push(t, s, a, "acme")
	connect(t, s, creds)
}

func TestMaxPayloadLimitsTenant(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {MaxPayload: 1024}})
	s := startServer(t, a)
	svc := connect(t, s, a.ServiceCreds())
	echo(t, svc, prefix+".prompts.*.*")
	nc := connect(t, s, filepath.Join(a.Dir(), "tenants", "acme.creds"))
	_, err := nc.Request(prefix+".prompts.s1", make([]byte, 1000), 2*time.Second)
	require.NoError(t, err)
	// The server tells the client the account's limit in an INFO after
	// authentication; by the time a request has round-tripped, it is known.
	require.EqualValues(t, 1024, nc.MaxPayload())
	require.ErrorIs(t, nc.Publish(prefix+".prompts.s1", make([]byte, 2048)), nats.ErrMaxPayload)
}

func TestOpenIsIdempotentAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	a, err := Open(dir, prefix)
	require.NoError(t, err)
	creds, err := a.AddTenant("acme", Limits{})
	require.NoError(t, err)
	svcBefore, err := os.ReadFile(filepath.Join(dir, "svc.jwt"))
	require.NoError(t, err)
	credsBefore, err := os.ReadFile(creds)
	require.NoError(t, err)

	b, err := Open(dir, prefix)
	require.NoError(t, err)
	require.Equal(t, a.ServerConfig(), b.ServerConfig())
	creds2, err := b.AddTenant("acme", Limits{MaxConnections: 3})
	require.NoError(t, err)
	require.Equal(t, creds, creds2)
	credsAfter, err := os.ReadFile(creds)
	require.NoError(t, err)
	require.Equal(t, credsBefore, credsAfter, "re-adding a tenant changed its creds")
	_, err = b.AddTenant("globex", Limits{})
	require.NoError(t, err)
	svcAfter, err := os.ReadFile(filepath.Join(dir, "svc.jwt"))
	require.NoError(t, err)
	require.Equal(t, svcBefore, svcAfter, "adding tenants changed the SVC JWT")

	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	for _, f := range []string{"operator.nk", "sys.nk", "svc.nk", "sys.creds", "svc.creds", "tenants/acme.nk", "tenants/acme.creds"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}

	_, err = Open(dir, "other")
	require.Error(t, err)

	// An SVC JWT with other exports (an older version) is re-signed by Open.
	stale := b.svcClaims()
	stale.Exports = stale.Exports[:1]
	j, err := stale.Encode(b.operator)
	require.NoError(t, err)
	require.NoError(t, writeFile(filepath.Join(dir, "svc.jwt"), j))
	_, err = Open(dir, prefix)
	require.NoError(t, err)
	svcAfter, err = os.ReadFile(filepath.Join(dir, "svc.jwt"))
	require.NoError(t, err)
	ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(svcAfter)))
	require.NoError(t, err)
	require.Len(t, ac.Exports, len(serviceKinds)+len(streamKinds)+len(lookups))
	for _, bad := range []string{"", "Acme", "-acme", "a.b", "a*", strings.Repeat("a", 33)} {
		_, err := b.AddTenant(bad, Limits{})
		require.Error(t, err, bad)
	}
	require.Error(t, b.Revoke("nobody"))
	_, err = b.Rotate("nobody")
	require.Error(t, err)
}

func TestServerConfigStartsAServer(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}})
	conf := filepath.Join(t.TempDir(), "nats.conf")
	cfg := a.ServerConfig() + "listen: 127.0.0.1:-1\njetstream { store_dir: " + `"` + t.TempDir() + `"` + " }\n"
	require.NoError(t, os.WriteFile(conf, []byte(cfg), 0o600))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	require.True(t, s.ReadyForConnections(10*time.Second))

	svc := connect(t, s, a.ServiceCreds())
	echo(t, svc, prefix+".narrate.*")
	acme := connect(t, s, filepath.Join(a.Dir(), "tenants", "acme.creds"))
	got, err := request(acme, prefix+".narrate")
	require.NoError(t, err)
	require.Equal(t, prefix+".narrate.acme", got)

	sys := connect(t, s, a.SystemCreds())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, a.PushAll(ctx, sys))
}

// TestExportsRequireNarrowedActivation re-signs globex's account with forged
// imports and checks the server refuses them: no import works without an
// activation token, and globex's token does not open acme's subjects.
func TestExportsRequireNarrowedActivation(t *testing.T) {
	a := newAuthority(t, map[string]Limits{"acme": {}, "globex": {}})
	s := startServer(t, a)
	svc := connect(t, s, a.ServiceCreds())
	svcGot := subscribe(t, svc, prefix+".prompts.*.*")
	_, err := svc.Subscribe(prefix+".prompts.*.*", func(m *nats.Msg) { _ = m.Respond([]byte(m.Subject)) })
	require.NoError(t, err)
	require.NoError(t, svc.Flush())
	sys := connect(t, s, a.SystemCreds())
	globex := connect(t, s, filepath.Join(a.Dir(), "tenants", "globex.creds"))
	got, err := request(globex, prefix+".prompts.s1")
	require.NoError(t, err)
	require.Equal(t, prefix+".prompts.globex.s1", got)

	forge := func(edit func(i *jwt.Import)) error {
		_, ac, err := a.loadTenant("globex", false)
		require.NoError(t, err)
		for _, i := range ac.Imports {
			if i.Name == "prompts" {
				edit(i)
			}
		}
		j, err := ac.Encode(a.operator)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return Push(ctx, sys, j)
	}
	for name, edit := range map[string]func(i *jwt.Import){
		"no token":       func(i *jwt.Import) { i.Token = "" },
		"acme's subject": func(i *jwt.Import) { i.Subject = jwt.Subject(prefix + ".prompts.acme.*") },
		"wildcard subject": func(i *jwt.Import) {
			i.Subject = jwt.Subject(prefix + ".prompts.*.*")
			i.LocalSubject = prefix + ".prompts.*.*"
		},
	} {
		if err := forge(edit); err != nil {
			t.Logf("%s: push refused: %v", name, err)
			continue // the server refused the JWT outright: fine
		}
		_, err := request(globex, prefix+".prompts.s1")
		require.Error(t, err, name)
		_, err = request(globex, prefix+".prompts.acme.s1")
		require.Error(t, err, name)
	}
	for _, subj := range svcGot.get() {
		require.Equal(t, prefix+".prompts.globex.s1", subj, "a forged import reached SVC")
	}
	push(t, s, a, "globex")
	got, err = request(globex, prefix+".prompts.s1")
	require.NoError(t, err)
	require.Equal(t, prefix+".prompts.globex.s1", got)
}

// TestTenantWeight: a weight is kept with the tenant's account, survives a
// later add that names none, can be changed, and only positive ones are
// taken.
func TestTenantWeight(t *testing.T) {
	t.Parallel()
	a, err := Open(t.TempDir(), prefix)
	require.NoError(t, err)
	weight := func(name string) int {
		w, err := a.Weight(name)
		require.NoError(t, err)
		return w
	}
	_, err = a.AddTenant("acme", Limits{})
	require.NoError(t, err)
	require.Equal(t, WeightDefault, weight("acme"), "a new tenant without a weight")
	_, err = a.AddTenant("globex", Limits{Weight: 3})
	require.NoError(t, err)
	require.Equal(t, 3, weight("globex"))
	_, err = a.AddTenant("globex", Limits{MaxConnections: 5})
	require.NoError(t, err)
	require.Equal(t, 3, weight("globex"), "an add without a weight keeps it")
	_, err = a.AddTenant("globex", Limits{Weight: 2})
	require.NoError(t, err)
	require.Equal(t, 2, weight("globex"))
	_, err = a.AddTenant("globex", Limits{Weight: -1})
	require.Error(t, err)
	ts, err := a.Tenants()
	require.NoError(t, err)
	require.Len(t, ts, 2)
	require.Equal(t, []int{1, 2}, []int{ts[0].Weight, ts[1].Weight})
	_, err = a.Weight("nobody")
	require.Error(t, err)
}
