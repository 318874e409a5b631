package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/cli"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/natstest"
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
	// pid of the server process.
	pid int
	// reg has the scheduler's and the narrator's metrics.
	reg *prometheus.Registry
	// roleCreds are the components' least-privilege users.
	roleCreds map[string]string
	// log records every component's log.
	log *testlog.Recorder
}

// startMultiTenant runs the pipeline under the service account of a
// multi-tenant deployment with these tenants, in the shipped
// configuration: nats-server as a process with
// deploy/nats/multi-tenant.conf and the auth.conf `narratoria tenant init`
// writes, every component under its role's user, the tenants added with
// `narratoria tenant add` once it runs (stateMax: a tenant's
// --max-state-bytes, when not the default).
func startMultiTenant(t *testing.T, narCfg narrator.Config, stateMax map[string]int64, tenants ...string) *multiTenant {
	t.Helper()
	return startMultiTenantWith(t, narCfg, stateMax, nil, tenants...)
}

// startMultiTenantWith is startMultiTenant with the components' bus
// configuration changed by edit (nil: as shipped).
func startMultiTenantWith(t *testing.T, narCfg narrator.Config, stateMax map[string]int64, edit func(*bus.Config), tenants ...string) *multiTenant {
	t.Helper()
	dir := testlog.OpenTempDir(t)
	authDir := filepath.Join(dir, "auth")
	auth, err := tenancy.Open(authDir, messages.SubjectPrefixDefault)
	require.NoError(t, err)
	mt := &multiTenant{auth: auth, creds: map[string]string{}, reg: prometheus.NewRegistry(), roleCreds: map[string]string{}}
	conf, err := os.ReadFile("../../deploy/nats/multi-tenant.conf")
	require.NoError(t, err)
	text := strings.Replace(string(conf), "listen: 127.0.0.1:4222", "listen: 127.0.0.1:-1\nports_file_dir: \""+dir+"\"", 1)
	// The store is on the test folder's filesystem, a small tmpfs perhaps:
	// JetStream reserves every stream's maximum (a hundred tenants' state
	// streams, 6.25 GiB), so the test sets the limit the operator would.
	text = strings.Replace(text, "store_dir: ./data/jetstream", "store_dir: "+strconv.Quote(filepath.Join(dir, "js"))+"\n  max_file_store: 1TB", 1)
	require.Contains(t, text, "max_file_store: 1TB", "the shipped configuration names its store as the test expects")
	require.Contains(t, text, "ports_file_dir", "the shipped configuration listens where the test expects")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "multi-tenant.conf"), []byte(text), 0o600))
	out := runCLI(t, "tenant", "init", "--auth-dir", authDir, "--server-conf", filepath.Join(dir, "auth.conf"), "--roles", "../../deploy/nats/accounts.conf")
	for _, role := range []string{"narrator", "scheduler", "operator", "worker_story", "worker_art"} {
		require.Contains(t, out, "role "+role)
		mt.roleCreds[role] = filepath.Join(authDir, "roles", role+".creds")
	}
	require.NotContains(t, out, "role skillworker", "no worker user serves every skill")
	// The test's skills' workers: a pool scoped to them, minted for a
	// multi-tenant deployment.
	runCLI(t, "creds", "worker", "--auth-dir", authDir, "--pool", "echo", "--skills", strings.Join(testPools["echo"], ","), "--tenants")
	mt.roleCreds["worker_echo"] = filepath.Join(authDir, "workers", "echo.creds")
	require.NotContains(t, out, "role game", "tenants take the game role's place")
	mt.url, mt.pid = natstest.StartConfigFile(t, filepath.Join(dir, "multi-tenant.conf"))
	// The operator provisions (components may not), for tenants.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "narratoria.yaml"), []byte("nats:\n  tenants: true\n"), 0o600))
	require.Contains(t, runCLI(t, "provision", "--nats-url", mt.url, "--creds", mt.roleCreds["operator"], "--config", filepath.Join(dir, "narratoria.yaml")), "NARRATORIA_PLANS")
	for _, name := range tenants {
		out := filepath.Join(dir, name+".creds")
		runCLI(t, "tenant", "add", name, "--auth-dir", authDir, "--nats-url", mt.url, "--creds-out", out,
			"--max-state-bytes", strconv.FormatInt(cmp.Or(stateMax[name], bus.TenantStateMaxDefault), 10))
		mt.creds[name] = out
	}

	log, rec := testlog.New(t)
	mt.log = rec
	busFor := func(role string) bus.Config {
		c := bus.Config{URL: mt.url, CredsFile: auth.ServiceCreds(), Tenants: true, Name: role}
		c.CredsFile, c.InboxPrefix, c.Provision = mt.roleCreds[role], roles[role], bus.ProvisionCheck
		if edit != nil {
			edit(&c)
		}
		return c
	}
	connect := func(role string) *nats.Conn {
		nc, err := bus.Connect(context.Background(), busFor(role), log)
		require.NoError(t, err, role)
		t.Cleanup(nc.Close)
		return nc
	}
	skills := writeEchoSkill(t)
	// hoard keeps 12 KiB more state at each run, under a key of its own.
	shellSkill{name: "hoard", description: "hoards", prompt: "Keeps things.", script: "keep", body: `#!/bin/sh
cat > /dev/null
pad=$(head -c 12288 /dev/zero | tr '\0' x)
echo '{"version":"0","type":"state_patch","patch":{"k'$$'":"'$pad'"}}'
echo '{"version":"0","type":"done","ok":true,"output":{}}'
`}.write(t, skills)
	wk, err := skillworker.New(connect("worker_echo"), skillworker.Config{SkillsDir: skills, WatchInterval: -1},
		skillworker.Options{Logger: log.With("component", "worker"), Bus: busFor("worker_echo")})
	require.NoError(t, err)
	require.NoError(t, wk.Start(t.Context()))
	t.Cleanup(wk.Stop)
	sch, err := scheduler.New(connect("scheduler"), scheduler.Config{LeaseTTL: time.Second},
		scheduler.Options{Logger: log.With("component", "scheduler"), Bus: busFor("scheduler"), Registerer: mt.reg})
	require.NoError(t, err)
	require.NoError(t, sch.Start(t.Context()))
	t.Cleanup(sch.Stop)
	require.Eventually(t, sch.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	nar, err := narrator.New(connect("narrator"), narCfg, narrator.Options{Logger: log.With("component", "narrator"), Bus: busFor("narrator"), Registerer: mt.reg})
	require.NoError(t, err)
	require.NoError(t, nar.Start(t.Context()))
	t.Cleanup(nar.Stop)
	mt.svc = connect("operator")
	return mt
}

// runCLI runs the narratoria CLI in process and fails the test unless it
// succeeds.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb strings.Builder
	code := cli.Main(args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	require.Equal(t, 0, code, "narratoria %s: %s", strings.Join(args, " "), errb.String())
	return out.String()
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

// TestTenantsAreIsolated runs two tenants on one deployment, with the
// shipped multi-tenant server configuration and tenants added by the CLI
// while it runs (operator mode, an account per tenant): both narrate at once, each in its own sessions —
// the same session ID in both is two sessions — and everything globex
// tries against acme's sessions and plans is refused or reaches nothing.
// Each tenant's quotas hold: globex past its prompt rate gets refusals
// saying so, and its full state stream fails its plans with
// storage_refused, while acme is refused neither. Revoking globex cuts it
// off and leaves acme running.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	// Each tenant may send 10 prompts at once and almost none after (acme
	// sends 8); globex has 64 KiB of session state.
	mt := startMultiTenant(t, narrator.Config{TenantPromptRate: 0.001, TenantPromptBurst: 10}, map[string]int64{"globex": 64 << 10}, "acme", "globex")
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
	state := func(session string) string {
		st, err := sjs.Stream(ctx, messages.TenantOf(session).StateStream())
		require.NoError(t, err)
		m, err := st.GetLastMsgForSubject(ctx, "narratoria.state."+session)
		require.NoError(t, err, "state of %s, in its tenant's state stream", session)
		return string(m.Data)
	}
	for _, k := range []string{"acme.s1", "globex.s1"} {
		require.Contains(t, state(k), `"said":true`)
	}

	// Durable prompts reach their own tenant's narrations only, once each
	// and in the order sent (the session's order holds within a tenant).
	for i := 1; i <= 5; i++ {
		_, err = acme.Submit(ctx, messages.Prompt{SessionID: "s2", PromptID: fmt.Sprintf("durable-%d", i), Text: "hello again"})
		require.NoError(t, err)
	}
	var order []string
	require.Eventually(t, func() bool {
		order = order[:0]
		for _, m := range acmeNarrations() {
			if strings.HasPrefix(m, "narratoria.narrations.s2 ") {
				var n messages.Narration
				require.NoError(t, json.Unmarshal([]byte(strings.SplitN(m, " ", 2)[1]), &n))
				order = append(order, n.PromptID)
			}
		}
		return len(order) >= 5
	}, testlog.Budget(30*time.Second), 20*time.Millisecond, "acme's durable prompts narrated, on its own subject")
	require.Equal(t, []string{"durable-1", "durable-2", "durable-3", "durable-4", "durable-5"}, order, "once each, in order")

	// The same durable prompt ID from two tenants (issue 45, attack 4):
	// globex's first, then acme's, in a session each calls s7. Both are
	// stored and narrated: the door's message ID carries the tenant.
	_, err = globex.Submit(ctx, messages.Prompt{SessionID: "s7", PromptID: "p-1", Text: "hello from globex"})
	require.NoError(t, err)
	_, err = acme.Submit(ctx, messages.Prompt{SessionID: "s7", PromptID: "p-1", Text: "hello from acme"})
	require.NoError(t, err)
	narratedP1 := func(seen []string) bool {
		for _, m := range seen {
			if strings.HasPrefix(m, "narratoria.narrations.s7 ") && strings.Contains(m, `"promptId":"p-1"`) {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return narratedP1(acmeNarrations()) }, testlog.Budget(30*time.Second), 20*time.Millisecond,
		"acme's p-1 narrated, though globex sent the same ID first")
	require.Eventually(t, func() bool { return narratedP1(globexSaw()) }, testlog.Budget(30*time.Second), 20*time.Millisecond,
		"globex's p-1 narrated too")

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
	require.ErrorIs(t, err, client.ErrUnknownPlan, "globex cannot read acme's plan")
	require.ErrorIs(t, globex.Cancel(ctx, plan, "globex", "attack"), client.ErrUnknownPlan, "globex cannot cancel acme's plan")
	// To globex the plan is none: its decision is refused by the check,
	// and one it publishes without the check is refused at the door, as a
	// decision on no plan in flight: nothing is stored, acme's plan stays
	// waiting.
	require.ErrorIs(t, globex.Deny(ctx, plan, "gate", "globex", "attack"), client.ErrUnknownPlan)
	gsubj, err := messages.Subjects{}.Approvals(plan, "gate")
	require.NoError(t, err)
	gjs0, err := jetstream.New(globexNC)
	require.NoError(t, err)
	_, err = gjs0.Publish(ctx, gsubj, []byte(`{"approved":false,"by":"globex","reason":"attack"}`))
	require.ErrorContains(t, err, "is not in flight")
	_, err = globexNC.Request("narratoria.sessions.acme.s1.reset", []byte(`{"clearState":true}`), time.Second)
	require.Error(t, err, "no reset of acme's session from globex")
	rr, err := globex.ResetSession(ctx, "s1", true)
	require.NoError(t, err, "globex resets its own s1")
	require.True(t, rr.ClearedState)
	require.Contains(t, state("acme.s1"), `"said":true`, "acme's s1 keeps its state after globex reset its own s1")
	require.Equal(t, "{}", state("globex.s1"))
	st, err := acme.PlanStatus(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, messages.ToolAwaitingApproval, st.Tools[0].State, "globex's denial changed nothing")
	// A prompt on the literal narratoria.prompts.* is refused in globex's
	// own account, with an error to globex.
	gjs, err := jetstream.New(globexNC)
	require.NoError(t, err)
	lctx, lcancel := context.WithTimeout(ctx, time.Second)
	_, err = gjs.Publish(lctx, "narratoria.prompts.*", []byte(`{"text":"to every session"}`))
	lcancel()
	require.Error(t, err, "a tenant's prompt on the literal narratoria.prompts.* is refused")
	// The server says why, on the publisher's connection: the mapped subject
	// is none a tenant's user may publish.
	errs := make(chan error, 4)
	probe, err := nats.Connect(mt.url, nats.UserCredentials(mt.creds["globex"]), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	require.NoError(t, err)
	require.NoError(t, probe.Publish("narratoria.prompts.*", []byte(`{"text":"to every session"}`)))
	_ = probe.Flush()
	select {
	case err := <-errs:
		require.ErrorContains(t, err, `Permissions Violation for Publish to "narratoria.prompts."`)
	case <-time.After(testlog.Budget(5 * time.Second)):
		t.Fatal("globex was not told its literal-wildcard prompt was refused")
	}
	probe.Close()
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

	// Quotas. The prompt rate: globex past its burst gets 429 naming it on
	// narrate and a refused narration for a durable prompt; acme is not
	// refused.
	refused := 0
	for i := range 12 {
		_, err := globex.Narrate(ctx, messages.Prompt{SessionID: "flood", Text: "again " + string(rune('a'+i))})
		var se *client.ServiceError
		if errors.As(err, &se) && se.Code == "429" {
			require.Contains(t, se.Message, `tenant "globex" is over its prompt rate`)
			refused++
			continue
		}
		require.NoError(t, err)
	}
	// globex has spent 1 of its 10 (its s1): at least the last 3 of these
	// 12 are refused (a request the client sent again after a slow first
	// attempt may have spent a token too).
	require.GreaterOrEqual(t, refused, 3, "a tenant over its rate is refused")
	require.Equal(t, float64(refused), testlog.CounterSum(t, mt.reg, "narratoria_narrator_tenant_prompts_refused_total", map[string]string{"tenant": "globex"}))
	require.Zero(t, testlog.CounterSum(t, mt.reg, "narratoria_narrator_tenant_prompts_refused_total", map[string]string{"tenant": "acme"}))
	flood := collect(t, globexNC, "narratoria.narrations.flood")
	_, err = globex.Submit(ctx, messages.Prompt{SessionID: "flood", PromptID: "durable", Text: "and again"})
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

	// Storage: plans of hoard (12 KiB more state each) in globex's session
	// until its 64 KiB state stream refuses; acme's then still commit.
	hoard := func(tenant string, results func() []string) messages.ExecutionResult {
		plan := uuid.NewString()
		_, err := sjs.Publish(ctx, "narratoria.plans."+tenant+".big", []byte(`{"requestId":"`+plan+`","tools":[{"toolId":"h","toolPath":"hoard/keep"}]}`))
		require.NoError(t, err)
		var res messages.ExecutionResult
		require.Eventually(t, func() bool {
			for _, m := range results() {
				if strings.Contains(m, plan) {
					require.NoError(t, json.Unmarshal([]byte(strings.SplitN(m, " ", 2)[1]), &res))
					return true
				}
			}
			return false
		}, testlog.Budget(30*time.Second), 20*time.Millisecond, "a result for %s's plan", tenant)
		return res
	}
	globexResults := collect(t, globexNC, "narratoria.results.big.>")
	var full messages.ExecutionResult
	for i := 0; i < 12; i++ {
		if full = hoard("globex", globexResults); !full.Success {
			break
		}
	}
	require.False(t, full.Success, "globex's states filled its state stream")
	require.Equal(t, messages.ReasonStorageRefused, full.FailureReason, full.Message)
	require.Contains(t, full.Message, "maximum bytes exceeded", "the result carries the server's words")
	require.Equal(t, 1.0, testlog.CounterSum(t, mt.reg, "narratoria_scheduler_store_refusals_total", map[string]string{"write": "state", "tenant": "globex"}))
	acmeResults := collect(t, acmeNC, "narratoria.results.big.>")
	kept := hoard("acme", acmeResults)
	require.True(t, kept.Success, "acme's state still commits: %s", kept.Message)

	// Inside the service account each component has its role's least
	// privilege, as in a single-tenant deployment: none hit a permission
	// it lacks, and the attacks of deploy/nats/accounts.conf's table are
	// refused from the role that would make them.
	require.False(t, mt.log.Contains("Permissions Violation"), "no component hit a permission it lacks")
	require.False(t, mt.log.Contains("permissions violation"))
	for _, r := range []struct{ role, subject string }{
		{"worker_echo", "$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes"},
		{"worker_echo", "narratoria.results.acme.s1.x"},
		{"worker_echo", "narratoria.state.acme.s1"},
		{"worker_echo", "$JS.API.DIRECT.GET.NARRATORIA_STATE_ACME.narratoria.state.acme.s1"},
		{"narrator", "$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes"},
		{"narrator", "narratoria.state.acme.s1"},
		{"scheduler", "$JS.API.STREAM.PURGE.NARRATORIA_STATE_ACME"}, // (its own plans bucket it may purge by key: docs/decisions/081)
		{"scheduler", "$JS.API.STREAM.DELETE.NARRATORIA_STATE_ACME"},
		{"scheduler", "$JS.API.STREAM.CREATE.NARRATORIA_STATE_EVIL"},
	} {
		require.True(t, mt.denied(t, r.role, r.subject), "%s may not publish on %s", r.role, r.subject)
	}

	// Revoked with the CLI: globex is cut off within seconds, acme runs on.
	runCLI(t, "tenant", "rm", "globex", "--auth-dir", mt.auth.Dir(), "--nats-url", mt.url)
	require.Contains(t, runCLI(t, "tenant", "ls", "--auth-dir", mt.auth.Dir()), "revoked")
	require.Eventually(t, func() bool { return globexNC.IsClosed() || !globexNC.IsConnected() }, testlog.Budget(10*time.Second), 20*time.Millisecond,
		"globex's connection is closed once revoked")
	_, err = nats.Connect(mt.url, nats.UserCredentials(mt.creds["globex"]))
	require.Error(t, err, "globex's credentials are refused")
	n, err = acme.Narrate(ctx, messages.Prompt{SessionID: "s1", Text: "still here"})
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

// TestUpWithTenants runs `narratoria up --tenants acme,globex` and the CLI
// with each tenant's .creds file, as the README says: each tenant
// narrates in a session both call "s1", and globex, watching its own s1
// and listing plans, sees nothing of acme's.
func TestUpWithTenants(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	narratoria, url, dir := startUp(t, []string{"--tenants", "acme,globex", "--console-port", "-1"})
	data, ready := filepath.Join(dir, "data"), filepath.Join(dir, "ready")
	creds := func(tenant string) string { return filepath.Join(data, "tenants", tenant+".creds") }
	require.FileExists(t, creds("acme"))
	require.FileExists(t, creds("globex"))

	// globex watches its own s1 while acme narrates in its s1.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	globexWatch := &testlog.Buffer{}
	watch := exec.CommandContext(ctx, narratoria, "watch", "--nats-url", url, "--creds", creds("globex"), "--session", "s1")
	watch.Stdout, watch.Stderr = globexWatch, globexWatch
	require.NoError(t, watch.Start())
	time.Sleep(300 * time.Millisecond) // let watch subscribe

	out, err := exec.Command(narratoria, "prompt", "--json", "--nats-url", url, "--creds", creds("acme"), "--session", "s1", "I roll to pick the lock").Output()
	require.NoError(t, err, string(out))
	var acmeNar messages.Narration
	require.NoError(t, json.Unmarshal(out, &acmeNar), string(out))
	require.Contains(t, acmeNar.Text, "The dice tumble", "acme narrates")
	ls, err := exec.Command(narratoria, "plan", "ls", "--nats-url", url, "--creds", creds("globex")).CombinedOutput()
	require.NoError(t, err, string(ls))
	time.Sleep(300 * time.Millisecond)
	require.NotContains(t, globexWatch.String(), "dice", "globex's s1 saw nothing of acme's s1")
	require.NotContains(t, globexWatch.String(), "narration:")

	out, err = exec.Command(narratoria, "prompt", "--nats-url", url, "--creds", creds("globex"), "--session", "s1", "I roll for initiative").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "The dice tumble", "globex narrates")
	time.Sleep(300 * time.Millisecond)
	cancel()
	_ = watch.Wait()
	require.Contains(t, globexWatch.String(), "narration:", "globex's watch sees its own narration")
	require.NotContains(t, globexWatch.String(), "pick the lock", "and never acme's")

	// Each tenant's console: acme's finds acme's result, globex's does not.
	b, err := os.ReadFile(ready)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 4, "the NATS URL, the console line, then one console per tenant: %q", b)
	acmeConsole, globexConsole := lines[len(lines)-2], lines[len(lines)-1]
	// Without a login a console answers 401; up's operator login (made at
	// its first start, no console users being configured) signs in to each.
	resp, err := http.Get(acmeConsole + "api/skills")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	st, err := os.Stat(filepath.Join(data, "console", "admin-password"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the password file is its owner's only")
	password, err := os.ReadFile(filepath.Join(data, "console", "admin-password"))
	require.NoError(t, err)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	for _, c := range []string{acmeConsole, globexConsole} {
		login, _ := json.Marshal(map[string]string{"name": "admin", "password": strings.TrimSpace(string(password))})
		resp, err := hc.Post(c+"api/login", "application/json", bytes.NewReader(login))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "log in to %s", c)
	}
	get := func(u string) (int, string) {
		resp, err := hc.Get(u)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get(acmeConsole + "api/results/" + acmeNar.PlanID)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"success":true`)
	code, body = get(globexConsole + "api/results/" + acmeNar.PlanID)
	require.Equal(t, http.StatusNotFound, code, "globex's console cannot read acme's result: %s", body)
	code, body = get(acmeConsole + "api/skills")
	require.Equal(t, http.StatusOK, code, body)

	// Without credentials nothing is reachable.
	out, err = exec.Command(narratoria, "prompt", "--nats-url", url, "--timeout", "5s", "--session", "s1", "hello").CombinedOutput()
	require.Error(t, err, "no credentials, no narration: %s", out)
}

// rss is the resident memory of a process, in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestHundredTenants measures what a tenant costs (docs/decisions/,
// "Tenants"): 100 tenants added with the CLI while the shipped server runs
// the pipeline, each with one connection, a narration watch and a prompt
// narrated, and its session bucket. Every tenant gets its own narration
// and no other's; the server's memory per tenant stays under 2 MiB.
func TestHundredTenants(t *testing.T) {
	if os.Getenv("NARRATORIA_LONG") == "" {
		t.Skip("set NARRATORIA_LONG=1 (make test-long)")
	}
	const n = 100
	mt := startMultiTenant(t, narrator.Config{}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(5*time.Minute))
	defer cancel()
	sjs, err := jetstream.New(mt.svc)
	require.NoError(t, err)
	streams := func() int {
		c := 0
		for range sjs.StreamNames(ctx).Name() {
			c++
		}
		return c
	}
	before, streamsBefore := rss(t, mt.pid), streams()
	dir := testlog.OpenTempDir(t)
	t0 := time.Now()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("t%03d", i)
		runCLI(t, "tenant", "add", names[i], "--auth-dir", mt.auth.Dir(), "--nats-url", mt.url, "--creds-out", filepath.Join(dir, names[i]+".creds"))
	}
	addEach := time.Since(t0) / n
	type tenantConn struct {
		c   *client.Client
		saw func() []string
	}
	conns := make([]tenantConn, n)
	for i, name := range names {
		nc, c := mt.tenant(t, filepath.Join(dir, name+".creds"))
		conns[i] = tenantConn{c, collect(t, nc, "narratoria.narrations.>")}
	}
	afterConnect := rss(t, mt.pid)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, tc := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := tc.c.Narrate(ctx, messages.Prompt{SessionID: "s1", Text: "hello from " + names[i]})
			assert(t, err == nil, "%s narrates: %v", names[i], err)
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())
	for i, tc := range conns {
		require.Eventually(t, func() bool { return len(tc.saw()) > 0 }, testlog.Budget(10*time.Second), 20*time.Millisecond)
		for _, m := range tc.saw() {
			require.Contains(t, m, `"sessionId":"`+names[i]+`.s1"`, "tenant %s saw only its own narration", names[i])
		}
	}
	after := rss(t, mt.pid)
	perTenant := (after - before) / n
	t.Logf("100 tenants: server RSS %d MiB before, %d MiB with 100 connected tenants, %d MiB after each narrated (%d KiB per tenant); streams %d before, %d after; tenant add %s each",
		before>>20, afterConnect>>20, after>>20, perTenant>>10, streamsBefore, streams(), addEach.Round(time.Millisecond))
	require.Less(t, perTenant, int64(2<<20), "a tenant costs the server less than 2 MiB")
	require.Equal(t, streamsBefore+n, streams(), "one stream per tenant: its state stream")
}

// denied reports whether the server refuses a publish on subject from a
// connection of role's user.
func (mt *multiTenant) denied(t *testing.T, role, subject string) bool {
	t.Helper()
	errs := make(chan error, 16)
	opts := []nats.Option{nats.UserCredentials(mt.roleCreds[role]), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })}
	if p := roles[role]; p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(mt.url, opts...)
	require.NoError(t, err, role)
	defer nc.Close()
	require.NoError(t, nc.Publish(subject, []byte(`{}`)))
	_ = nc.FlushTimeout(2 * time.Second)
	timeout := time.After(testlog.Budget(2 * time.Second))
	for {
		select {
		case err := <-errs:
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") && strings.Contains(err.Error(), subject) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}
