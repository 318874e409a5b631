package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/tenancy"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// multiTenant is a nats-server in operator mode with the authority of
// `narratoria up --tenants`, and the pipeline under the service account.
type multiTenant struct {
	auth *tenancy.Authority
	url  string
	svc  *nats.Conn
	// creds of each tenant added at the start.
	creds map[string]string
}

func startMultiTenant(t *testing.T, narCfg narrator.Config, tenants ...string) *multiTenant {
	t.Helper()
	dir := t.TempDir()
	auth, err := tenancy.Open(dir, messages.SubjectPrefixDefault)
	require.NoError(t, err)
	mt := &multiTenant{auth: auth, creds: map[string]string{}}
	for _, name := range tenants {
		mt.creds[name], err = auth.AddTenant(name, tenancy.Limits{})
		require.NoError(t, err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"), NoSigs: true, NoLog: true}
	require.NoError(t, auth.Configure(opts))
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	mt.url = srv.ClientURL()

	log, _ := testlog.New(t)
	cfg := bus.Config{URL: mt.url, CredsFile: auth.ServiceCreds(), Tenants: true}
	connect := func(name string) *nats.Conn {
		c := cfg
		c.Name = name
		nc, err := bus.Connect(context.Background(), c, log)
		require.NoError(t, err, name)
		t.Cleanup(nc.Close)
		return nc
	}
	wk, err := skillworker.New(connect("worker"), skillworker.Config{SkillsDir: writeEchoSkill(t), WatchInterval: -1},
		skillworker.Options{Logger: log.With("component", "worker"), Bus: cfg})
	require.NoError(t, err)
	require.NoError(t, wk.Start(t.Context()))
	t.Cleanup(wk.Stop)
	sch, err := scheduler.New(connect("scheduler"), scheduler.Config{LeaseTTL: time.Second},
		scheduler.Options{Logger: log.With("component", "scheduler"), Bus: cfg})
	require.NoError(t, err)
	require.NoError(t, sch.Start(t.Context()))
	t.Cleanup(sch.Stop)
	require.Eventually(t, sch.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	nar, err := narrator.New(connect("narrator"), narCfg, narrator.Options{Logger: log.With("component", "narrator"), Bus: cfg})
	require.NoError(t, err)
	require.NoError(t, nar.Start(t.Context()))
	t.Cleanup(nar.Stop)
	mt.svc = connect("operator")
	return mt
}

// tenant connects with a tenant's credentials, recording the permission
// and authorization errors the server sends.
func (mt *multiTenant) tenant(t *testing.T, creds string) (*nats.Conn, *client.Client) {
	t.Helper()
	nc, err := nats.Connect(mt.url, nats.UserCredentials(creds), nats.MaxReconnects(0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	require.NoError(t, err)
	return nc, c
}

// collect subscribes nc to subject and returns what has arrived so far.
func collect(t *testing.T, nc *nats.Conn, subject string) func() []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	_, err := nc.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		got = append(got, m.Subject+" "+string(m.Data))
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// TestTenantsAreIsolated runs two tenants on one deployment, in the
// configuration of `narratoria up --tenants acme,globex` (operator mode,
// an account per tenant): both narrate at once, each in its own sessions —
// the same session ID in both is two sessions — and everything globex
// tries against acme's sessions and plans is refused or reaches nothing.
// Revoking globex cuts it off and leaves acme running.
func TestTenantsAreIsolated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	mt := startMultiTenant(t, narrator.Config{}, "acme", "globex")
	acmeNC, acme := mt.tenant(t, mt.creds["acme"])
	globexNC, globex := mt.tenant(t, mt.creds["globex"])
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(90*time.Second))
	defer cancel()

	// globex listens to everything it can name, acme's included.
	globexSaw := collect(t, globexNC, ">")
	acmeNarrations := collect(t, acmeNC, "narratoria.narrations.>")

	// Both narrate at once, in a session each calls "s1".
	var wg sync.WaitGroup
	nars := map[string]*messages.Narration{}
	var mu sync.Mutex
	for name, c := range map[string]*client.Client{"acme": acme, "globex": globex} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := c.Narrate(ctx, messages.Prompt{SessionID: "s1", PromptID: "same-id", Text: "hello from " + name})
			if !assert(t, err == nil, "%s narrates: %v", name, err) {
				return
			}
			mu.Lock()
			nars[name] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, nars, 2)
	for name, n := range nars {
		require.False(t, n.Fallback, "%s narrated with its tool: %+v", name, n.Trace)
		require.Contains(t, n.Text, "An echo answers.")
		require.Equal(t, name+".s1", n.SessionID, "the service names the session with its tenant")
	}
	require.NotEqual(t, nars["acme"].PlanID, nars["globex"].PlanID)

	// Two sessions, not one: each has its own state in the service.
	sjs, err := jetstream.New(mt.svc)
	require.NoError(t, err)
	skv, err := sjs.KeyValue(ctx, messages.BucketSessions)
	require.NoError(t, err)
	for _, k := range []string{"acme.s1", "globex.s1"} {
		_, err := skv.Get(ctx, k)
		require.NoError(t, err, "state of %s", k)
	}

	// A durable prompt reaches its own tenant's narrations only.
	_, err = acme.Submit(ctx, messages.Prompt{SessionID: "s2", PromptID: "durable-1", Text: "hello again"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, m := range acmeNarrations() {
			if strings.HasPrefix(m, "narratoria.narrations.s2 ") && strings.Contains(m, `"durable-1"`) {
				return true
			}
		}
		return false
	}, testlog.Budget(30*time.Second), 20*time.Millisecond, "acme's durable prompt narrated, on its own subject")

	// A plan of acme's waiting for approval (published by the service, as
	// the narrator would for acme's session s9).
	plan := uuid.NewString()
	_, err = sjs.Publish(ctx, "narratoria.plans.acme.s9",
		[]byte(`{"requestId":"`+plan+`","tools":[{"toolId":"gate","toolPath":"echo/say","requiresApproval":true}]}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := acme.PlanStatus(ctx, plan)
		return err == nil && len(st.Tools) == 1 && st.Tools[0].State == messages.ToolAwaitingApproval
	}, testlog.Budget(20*time.Second), 50*time.Millisecond, "acme sees its plan wait for approval")

	// globex: each attempt against acme's plan and sessions.
	list, err := globex.ListPlans(ctx, "")
	require.NoError(t, err)
	require.Empty(t, list, "globex lists none of acme's plans")
	list, err = globex.ListPlans(ctx, "s9")
	require.NoError(t, err)
	require.Empty(t, list)
	_, err = globex.PlanStatus(ctx, plan)
	require.ErrorContains(t, err, "not in flight", "globex cannot read acme's plan")
	require.ErrorContains(t, globex.Cancel(ctx, plan, "globex", "attack"), "not in flight", "globex cannot cancel acme's plan")
	// A decision is stored under globex's own name, where acme's plan never
	// looks: it stays waiting.
	require.NoError(t, globex.Deny(ctx, plan, "gate", "globex", "attack"))
	_, err = globexNC.Request("narratoria.sessions.acme.s1.reset", []byte(`{"clearState":true}`), time.Second)
	require.Error(t, err, "no reset of acme's session from globex")
	rr, err := globex.ResetSession(ctx, "s1", true)
	require.NoError(t, err, "globex resets its own s1")
	require.True(t, rr.ClearedState)
	_, err = skv.Get(ctx, "acme.s1")
	require.NoError(t, err, "acme's s1 keeps its state after globex reset its own s1")
	st, err := acme.PlanStatus(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, messages.ToolAwaitingApproval, st.Tools[0].State, "globex's denial changed nothing")
	// Subjects naming acme from inside globex's account reach nothing.
	for _, subj := range []string{"narratoria.prompts.acme.s1", "narratoria.narrations.acme.s1", "narratoria.plans.acme.s1"} {
		require.NoError(t, globexNC.Publish(subj, []byte(`{"sessionId":"s1","text":"smuggled"}`)))
	}
	require.NoError(t, globexNC.Flush())

	// acme's own decision is applied and its result comes back to it.
	results := collect(t, acmeNC, "narratoria.results.s9.>")
	require.NoError(t, acme.Approve(ctx, plan, "gate", "gm", "ok"))
	require.Eventually(t, func() bool { return len(results()) > 0 }, testlog.Budget(30*time.Second), 20*time.Millisecond, "acme's plan finished")
	var res messages.ExecutionResult
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(results()[0], " ", 2)[1]), &res))
	require.True(t, res.Success, "approved by acme, not denied by globex: %s", res.Message)

	for _, m := range globexSaw() {
		require.NotContains(t, m, "hello from acme", "globex saw acme's traffic: %s", m)
		require.NotContains(t, m, `"acme.`, "globex saw acme's traffic: %s", m)
		require.NotContains(t, m, "durable-1", "globex saw acme's traffic: %s", m)
	}
	require.NotEmpty(t, globexSaw(), "globex did see its own traffic")

	// Revoked: globex is cut off within seconds, acme runs on.
	require.NoError(t, mt.auth.Revoke("globex"))
	sys, err := nats.Connect(mt.url, nats.UserCredentials(mt.auth.SystemCreds()))
	require.NoError(t, err)
	defer sys.Close()
	jwt, err := mt.auth.AccountJWT("globex")
	require.NoError(t, err)
	require.NoError(t, tenancy.Push(ctx, sys, jwt))
	require.Eventually(t, func() bool { return globexNC.IsClosed() || !globexNC.IsConnected() }, testlog.Budget(10*time.Second), 20*time.Millisecond,
		"globex's connection is closed once revoked")
	_, err = nats.Connect(mt.url, nats.UserCredentials(mt.creds["globex"]))
	require.Error(t, err, "globex's credentials are refused")
	n, err := acme.Narrate(ctx, messages.Prompt{SessionID: "s1", Text: "still here"})
	require.NoError(t, err)
	require.False(t, n.Fallback)
}

// assert reports a failed condition from a goroutine (require must not
// be called there) and says whether it held.
func assert(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
	return ok
}

// TestTenantPromptRate gives each tenant a burst of 2 prompts and almost
// no rate after it: a tenant that sends more gets refusals saying so, on
// narrate (429) and as a refused narration of a durable prompt, and the
// other tenant is not refused.
func TestTenantPromptRate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	mt := startMultiTenant(t, narrator.Config{TenantPromptRate: 0.001, TenantPromptBurst: 2}, "acme", "globex")
	_, acme := mt.tenant(t, mt.creds["acme"])
	globexNC, globex := mt.tenant(t, mt.creds["globex"])
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(90*time.Second))
	defer cancel()
	refused := 0
	for i := range 6 {
		_, err := globex.Narrate(ctx, messages.Prompt{SessionID: "flood", Text: "again " + string(rune('a'+i))})
		var se *client.ServiceError
		if errors.As(err, &se) && se.Code == "429" {
			require.Contains(t, se.Message, `tenant "globex" is over its prompt rate`)
			refused++
			continue
		}
		require.NoError(t, err)
	}
	require.Equal(t, 4, refused, "a tenant over its rate is refused")
	flood := collect(t, globexNC, "narratoria.narrations.flood")
	_, err := globex.Submit(ctx, messages.Prompt{SessionID: "flood", PromptID: "durable", Text: "and again"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, m := range flood() {
			if strings.Contains(m, `"refused":"tenant \"globex\" is over its prompt rate`) {
				return true
			}
		}
		return false
	}, testlog.Budget(20*time.Second), 20*time.Millisecond, "a durable prompt over the rate is answered with a refusal")
	n, err := acme.Narrate(ctx, messages.Prompt{SessionID: "calm", Text: "hello"})
	require.NoError(t, err, "the other tenant is not refused")
	require.False(t, n.Fallback)
}
