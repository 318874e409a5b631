package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/cli"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/tenancy"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// roles are the users of deploy/nats/accounts.conf with their inbox prefix.
var roles = map[string]string{
	"game": "_INBOX_game", "narrator": "_INBOX_narrator", "scheduler": "_INBOX_scheduler", "operator": "",
	"console": "_INBOX_console",
	// the shipped worker pools
	"worker_story": tenancy.WorkerInbox("story"), "worker_art": tenancy.WorkerInbox("art"),
	// the tests' worker pools, added to accounts.conf as `narratoria creds
	// worker --conf` prints them: skill A (echo) and skill B (dice-roller)
	"worker_echo": tenancy.WorkerInbox("echo"), "worker_dice": tenancy.WorkerInbox("dice"),
}

// testPools are the tests' worker pools and their skills.
var testPools = map[string][]string{"echo": {"echo", "hoard"}, "dice": {"dice-roller"}}

// secured is a real nats-server running the shipped accounts.conf.
type secured struct {
	srv *server.Server
	// conf is the server's configuration file; tlsConf what the test adds
	// to it.
	conf    string
	tlsConf func(*server.Options)
	url     string
	// tls, when set, adds TLS files to every role's configuration.
	tls func(*bus.Config)
}

// startSecured starts nats-server with deploy/nats/accounts.conf (every
// password "pw-<role>") and JetStream in a temporary folder.
func startSecured(t *testing.T, tlsConf func(*server.Options)) *secured {
	t.Helper()
	for role := range roles {
		t.Setenv(strings.ToUpper(role)+"_PASSWORD", "pw-"+role)
	}
	t.Setenv("SYS_PASSWORD", "pw-sys")
	dir := testlog.OpenTempDir(t)
	conf := filepath.Join(dir, "server.conf")
	accounts, err := os.ReadFile("../../deploy/nats/accounts.conf")
	require.NoError(t, err)
	// The tests' worker pools, added to the users as the generator prints
	// them.
	var pools strings.Builder
	for pool, skills := range testPools {
		block, err := tenancy.WorkerConf(messages.SubjectPrefixDefault, pool, skills)
		require.NoError(t, err)
		pools.WriteString(block)
	}
	const before = "      # Operators: everything"
	require.Contains(t, string(accounts), before)
	accounts = []byte(strings.Replace(string(accounts), before, pools.String()+before, 1))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o644))
	require.NoError(t, os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\njetstream { store_dir: \""+filepath.Join(dir, "js")+"\" }\ninclude accounts.conf\n"), 0o644))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	opts.NoSigs, opts.NoLog = true, true
	if tlsConf != nil {
		tlsConf(opts)
	}
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	s := &secured{srv: srv, conf: conf, tlsConf: tlsConf, url: srv.ClientURL()}
	t.Cleanup(func() { s.srv.Shutdown(); s.srv.WaitForShutdown() })
	return s
}

// restart stops the server and starts it again on its port and store: the
// components reconnect and set up again what they had (consumers, watches)
// under their own users.
func (s *secured) restart(t *testing.T) {
	t.Helper()
	port := s.srv.Addr().(*net.TCPAddr).Port
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	opts, err := server.ProcessConfigFile(s.conf)
	require.NoError(t, err)
	opts.NoSigs, opts.NoLog, opts.Port = true, true, port
	if s.tlsConf != nil {
		s.tlsConf(opts)
	}
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	s.srv = srv
}

// provision runs `narratoria provision` as the operator.
func (s *secured) provision(t *testing.T) {
	t.Helper()
	var out, errb strings.Builder
	args := []string{"provision", "--nats-url", s.url, "--user", "operator", "--password", "pw-operator"}
	if s.tls != nil {
		var c bus.Config
		s.tls(&c)
		args = append(args, "--tls-ca", c.TLSCA, "--tls-cert", c.TLSCert, "--tls-key", c.TLSKey)
	}
	code := cli.Main(args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "NARRATORIA_PLANS")
	// Idempotent: a second run changes nothing (a needless stream update at
	// every component start would race consumers being created).
	out.Reset()
	code = cli.Main(args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	require.Equal(t, 0, code, errb.String())
	require.NotContains(t, out.String(), "updated", out.String())
	require.NotContains(t, out.String(), "created", out.String())
}

// securedPipeline is the shipped configuration provisioned with the
// whole pipeline running under its least-privilege users, and the
// pipeline's log.
func securedPipeline(t *testing.T, edit func(*server.Options)) (*secured, *testlog.Recorder) {
	t.Helper()
	s := startSecured(t, edit)
	s.provision(t)
	log, rec := testlog.New(t)
	s.pipeline(t, log)
	return s, rec
}

// pipeline starts a skill worker (the echo skill, a real sh script), a
// scheduler and a narrator, each under its own user.
func (s *secured) pipeline(t *testing.T, log *slog.Logger) (*skillworker.Worker, *scheduler.Scheduler, *narrator.Narrator) {
	t.Helper()
	wk, err := skillworker.New(s.connect(t, "worker_echo", log), skillworker.Config{SkillsDir: writeEchoSkill(t), WatchInterval: -1},
		skillworker.Options{Logger: log.With("component", "worker"), Bus: s.busFor("worker_echo")})
	require.NoError(t, err)
	require.NoError(t, wk.Start(t.Context()))
	t.Cleanup(wk.Stop)
	sch, err := scheduler.New(s.connect(t, "scheduler", log), scheduler.Config{LeaseTTL: time.Second},
		scheduler.Options{Logger: log.With("component", "scheduler"), Bus: s.busFor("scheduler")})
	require.NoError(t, err)
	require.NoError(t, sch.Start(t.Context()))
	t.Cleanup(sch.Stop)
	require.Eventually(t, sch.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	nar, err := narrator.New(s.connect(t, "narrator", log), narrator.Config{}, narrator.Options{Logger: log.With("component", "narrator"),
		Bus: s.busFor("narrator")})
	require.NoError(t, err)
	require.NoError(t, nar.Start(t.Context()))
	t.Cleanup(nar.Stop)
	return wk, sch, nar
}

// busFor is the bus configuration of a role: its user, password and inbox
// prefix; components only check what an operator provisioned.
func (s *secured) busFor(role string) bus.Config {
	c := bus.Config{URL: s.url, Name: role, User: role, Password: "pw-" + role, InboxPrefix: roles[role], Provision: bus.ProvisionCheck}
	if s.tls != nil {
		s.tls(&c)
	}
	return c
}

func (s *secured) connect(t *testing.T, role string, log *slog.Logger) *nats.Conn {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := bus.Connect(context.Background(), s.busFor(role), log)
	require.NoError(t, err, role)
	t.Cleanup(nc.Close)
	return nc
}

// deniedWithin runs act with a context that ends as soon as nc's last
// error is a new permissions violation (the server refused what act sent:
// a denied publish or request gets no answer, only that error), or after
// a budget of 5 s; it returns whether the violation came, and act's error.
func deniedWithin(ctx context.Context, nc *nats.Conn, act func(context.Context) error) (denied bool, err error) {
	before := nc.LastError()
	actx, cancel := context.WithTimeout(ctx, testlog.Budget(5*time.Second))
	defer cancel()
	var seen atomic.Bool
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for actx.Err() == nil {
			if e := nc.LastError(); e != nil && e != before && strings.Contains(strings.ToLower(e.Error()), "permissions violation") {
				seen.Store(true)
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err = act(actx)
	cancel()
	<-watching
	return seen.Load(), err
}

// probe is a connection of one role, for trying one action at a time.
type probe struct {
	nc *nats.Conn
}

func (s *secured) probe(t *testing.T, role string) *probe {
	t.Helper()
	// The refusals are read from the connection's last error; the handler
	// only keeps nats.go from printing each to stderr.
	opts := []nats.Option{nats.UserInfo(role, "pw-"+role), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if roles[role] != "" {
		opts = append(opts, nats.CustomInboxPrefix(roles[role]))
	}
	nc, err := nats.Connect(s.url, opts...)
	require.NoError(t, err, role)
	t.Cleanup(nc.Close)
	return &probe{nc: nc}
}

// denied runs act and reports whether the server refused it with a
// permissions violation on subject. The server answers a connection's
// commands in order, so its -ERR for act arrives before the PONG of the
// flush after it, and nats.go records it as the connection's last error
// before the flush returns: no waiting for an error that will not come.
func (p *probe) denied(t *testing.T, subject string, act func(nc *nats.Conn)) bool {
	t.Helper()
	before := p.nc.LastError()
	act(p.nc)
	require.NoError(t, p.nc.FlushTimeout(testlog.Budget(5*time.Second)), "the server answered the flush after %s", subject)
	err := p.nc.LastError()
	return err != nil && err != before && strings.Contains(strings.ToLower(err.Error()), "permissions violation") && strings.Contains(err.Error(), subject)
}

func pub(subject string) func(*nats.Conn) {
	return func(nc *nats.Conn) { _ = nc.Publish(subject, []byte(`{}`)) }
}

func sub(subject string) func(*nats.Conn) {
	return func(nc *nats.Conn) { _, _ = nc.SubscribeSync(subject) }
}

// TestPermissions runs a prompt end to end with every component under its
// own user of the shipped accounts.conf on a real nats-server, then checks
// the role table of deploy/README.md action by action.
func TestPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	s := startSecured(t, nil)
	log, rec := testlog.New(t)

	// The operator provisions; no component may.
	op := s.connect(t, "operator", nil)
	js, err := jetstream.New(op)
	require.NoError(t, err)
	s.provision(t)

	wk, sch, nar := s.pipeline(t, log)

	game := s.connect(t, "game", nil)
	c, err := client.New(game)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second) // one budget for every step below, under a loaded -race run
	defer cancel()
	n, err := c.Narrate(ctx, messages.Prompt{SessionID: "p1", Text: "hello there"})
	require.NoError(t, err)
	require.False(t, n.Fallback, "narrated with tools: %+v", n.Trace)
	require.Contains(t, n.Text, "An echo answers.")

	// The game, which shares no disk with the worker, fetches the
	// picture by its object name: the worker's file is gone by then.
	require.Len(t, n.Assets, 1, "the echo skill's picture")
	pic := n.Assets[0]
	require.Equal(t, messages.AssetObjectName(pic.SHA256), pic.Object)
	require.NoError(t, os.Remove(pic.Path))
	data, err := c.Asset(ctx, pic)
	require.NoError(t, err, "the game reads the asset object")
	require.Contains(t, string(data), echoPicture)
	_, mediaType, err := c.AssetObject(ctx, pic.Object)
	require.NoError(t, err)
	require.Equal(t, "image/svg+xml", mediaType)
	checkWorkerCannotPurgeAssets(t, ctx, s, js, c, pic)
	// The game cannot write the store.
	gobs, err := jetstream.New(game)
	require.NoError(t, err)
	gstore, err := gobs.ObjectStore(ctx, messages.BucketAssets)
	require.NoError(t, err)
	denied, err := deniedWithin(ctx, game, func(pctx context.Context) error {
		_, err := gstore.PutBytes(pctx, pic.Object, []byte("<svg>forged by the game</svg>"))
		return err
	})
	require.Error(t, err, "the game may not write assets")
	require.True(t, denied, "the server refused the game's asset write as a permissions violation")

	// A durable prompt, watched as the game.
	got := make(chan *messages.Narration, 1)
	w, err := c.Watch("p1", func(u client.Update) {
		if u.Narration != nil && u.Narration.PromptID == "durable-1" {
			got <- u.Narration
		}
	})
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	_, err = c.Submit(ctx, messages.Prompt{SessionID: "p1", PromptID: "durable-1", Text: "hello again"})
	require.NoError(t, err)
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("the durable prompt was not narrated")
	}

	// A prompt on the literal subject narratoria.prompts.* is refused at
	// the door, with an error to the game, and nothing is stored; real
	// prompts go on.
	gjs, err := jetstream.New(game)
	require.NoError(t, err)
	lctx, lcancel := context.WithTimeout(ctx, time.Second)
	_, err = gjs.Publish(lctx, "narratoria.prompts.*", []byte(`{"text":"to every session"}`))
	lcancel()
	require.Error(t, err, "a prompt on the literal narratoria.prompts.* is refused")
	t.Logf("the game's literal narratoria.prompts.* publish: %v", err)
	pst, err := js.Stream(ctx, messages.StreamPrompts)
	require.NoError(t, err)
	pinfo, err := pst.Info(ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	for subj := range pinfo.State.Subjects {
		require.NotContains(t, subj, "*", "nothing stored under a wildcard: %s", subj)
	}
	_, err = c.Narrate(ctx, messages.Prompt{SessionID: "p1", Text: "and after the attempt"})
	require.NoError(t, err, "real prompts go on")

	// Every outcome went to its scheduler as a request (the shipped
	// accounts let it take them): none was stored on the outcomes stream.
	ost, err := js.Stream(ctx, messages.StreamOutcomes)
	require.NoError(t, err)
	oinfo, err := ost.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, oinfo.State.LastSeq, "no outcome was stored on the stream")

	// The finished plans' keys are gone from the plans bucket: the
	// scheduler purged them key by key.
	pkv, err := js.KeyValue(ctx, messages.BucketPlans)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		lister, err := pkv.ListKeysFiltered(ctx, "p.>", "t.>")
		if err != nil {
			return false
		}
		n := 0
		for range lister.Keys() {
			n++
		}
		return n == 0
	}, testlog.Budget(20*time.Second), 200*time.Millisecond, "finished plans leave no keys")

	// 300 registry updates as the skill worker: the narrator's and the
	// scheduler's watches keep up (flow control is allowed), and the
	// catalogue still has the skill. What fails is a watch that stops (a
	// stalled flow control): the budget is generous, not a speed claim
	// (under two CPU hogs the 19 MB of values outlasted a budget of 15 s,
	// scaled to over 45 s).
	wjs, err := jetstream.New(s.connect(t, "worker_echo", nil))
	require.NoError(t, err)
	skv, err := wjs.KeyValue(ctx, messages.BucketSkills)
	require.NoError(t, err)
	entry, err := skv.Get(ctx, "echo")
	require.NoError(t, err)
	for i := range 300 {
		var re map[string]any
		require.NoError(t, json.Unmarshal(entry.Value(), &re))
		// Big values (64 KiB) make the server ask for flow control.
		re["description"] = strings.Repeat(string(rune('a'+i%26)), 64<<10)
		// Each update carries a fresh heartbeat, as the worker's own do: on
		// a busy machine the 300 updates outlast the worker TTL, and an
		// update with the first one's time would declare the worker gone.
		if ws, ok := re["workers"].(map[string]any); ok {
			for _, w := range ws {
				if wm, ok := w.(map[string]any); ok {
					wm["lastSeen"] = time.Now().UTC()
				}
			}
		}
		b, _ := json.Marshal(re)
		_, err := skv.Put(ctx, "echo", b)
		require.NoError(t, err)
	}
	last, err := skv.Get(ctx, "echo")
	require.NoError(t, err)
	for deadline := time.Now().Add(testlog.Budget(60 * time.Second)); nar.CatalogueRevision("echo") != last.Revision() || sch.RegistryRevision("echo") != last.Revision(); {
		if time.Now().After(deadline) {
			t.Fatalf("the watches did not reach the last update (revision %d): the narrator's is at %d, the scheduler's at %d",
				last.Revision(), nar.CatalogueRevision("echo"), sch.RegistryRevision("echo"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	n, err = c.Narrate(ctx, messages.Prompt{SessionID: "p2", Text: "hello after the updates"})
	require.NoError(t, err)
	require.Contains(t, n.Text, "An echo answers.", "the catalogue is complete after 300 updates")

	// Control and approvals as the game.
	_, err = c.ListPlans(ctx, "")
	require.NoError(t, err)
	require.ErrorIs(t, c.Approve(ctx, "0e8b8f3e-3d6a-4b4e-9d57-0f4f3a1f0a01", "t", "gm", "early"), client.ErrUnknownPlan,
		"the game may ask whether a tool takes a decision")
	gameJS, err := jetstream.New(s.connect(t, "game", log))
	require.NoError(t, err)
	_, err = gameJS.Publish(ctx, "narratoria.approvals.0e8b8f3e-3d6a-4b4e-9d57-0f4f3a1f0a01.t", []byte(`{"approved":true,"by":"gm"}`))
	require.ErrorContains(t, err, "is not in flight", "a decision published without the check is refused at the door (nothing kept for it: TestFloodsContained)")

	// A worker under the per-skill user serves its skill end to end.
	wk2, err := skillworker.New(s.connect(t, "worker_dice", log), skillworker.Config{SkillsDir: writeDiceRollerSkill(t), WatchInterval: -1},
		skillworker.Options{Logger: log.With("component", "worker-dice-roller"), Bus: s.busFor("worker_dice")})
	require.NoError(t, err)
	require.NoError(t, wk2.Start(ctx))
	t.Cleanup(wk2.Stop)
	// The scheduler learns of the new skill through its registry watch:
	// a plan sent before that is refused as naming an unknown skill.
	require.Eventually(t, func() bool { return sch.RegistryRevision("dice-roller") > 0 }, testlog.Budget(10*time.Second), 20*time.Millisecond,
		"the scheduler sees the per-skill worker's skill")
	opc := s.connect(t, "operator", nil)
	opjs, err := jetstream.New(opc)
	require.NoError(t, err)
	rolled := uuid.NewString()
	rsub, err := opc.SubscribeSync("narratoria.results.roll." + rolled)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := opjs.Publish(ctx, "narratoria.plans.roll", []byte(`{"requestId":"`+rolled+`","tools":[{"toolId":"r","toolPath":"dice-roller/roll"}]}`))
		return err == nil
	}, testlog.Budget(10*time.Second), 100*time.Millisecond)
	rmsg, err := rsub.NextMsg(testlog.Budget(20 * time.Second))
	require.NoError(t, err)
	var rres messages.ExecutionResult
	require.NoError(t, json.Unmarshal(rmsg.Data, &rres))
	require.True(t, rres.Success, "the per-skill worker ran its skill: %s", rres.Message)

	// A restart of the server: every component sets up again what it had
	// (consumers, watches) under its own user, and prompts go on.
	s.restart(t)
	require.Eventually(t, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.Narrate(rctx, messages.Prompt{SessionID: "p3", Text: "hello after the restart"})
		return err == nil
	}, testlog.Budget(60*time.Second), time.Second, "narrated after the server's restart")

	require.False(t, rec.Contains("Permissions Violation"), "no component hit a permission it lacks")
	require.False(t, rec.Contains("permissions violation"))
	require.NoError(t, sch.Ready())
	require.NoError(t, nar.Ready())
	require.NoError(t, wk.Ready())

	// A worker of skill B (dice-roller) makes up an outcome of a tool of
	// skill A (echo): it may publish outcomes, but has no token of A's
	// attempts (it cannot read A's jobs), so the scheduler takes none.
	forger := s.connect(t, "worker_dice", nil)
	fjs, err := jetstream.New(forger)
	require.NoError(t, err)
	forged, _ := json.Marshal(messages.Outcome{PlanID: uuid.NewString(), SessionID: "p1", ToolID: "t", Skill: "echo", Script: "say", Attempt: 1,
		Token: "made-up", State: messages.ToolSuccess, Output: json.RawMessage(`{"admin":true,"gold":999999}`)})
	_, err = fjs.Publish(ctx, "narratoria.outcomes.p1.forged.t", forged)
	require.NoError(t, err, "a worker may publish outcomes")
	require.Eventually(t, func() bool { return rec.Contains("outcome refused: its token is not the attempt's") }, testlog.Budget(10*time.Second), 50*time.Millisecond,
		"the scheduler refuses an outcome without its attempt's token")

	// The role table.
	type row struct {
		role, subject string
		act           func(*nats.Conn)
		deny          bool
	}
	table := []row{
		// game
		{"game", "narratoria.plans.x", pub("narratoria.plans.x"), true},
		{"game", "narratoria.jobs.echo.x.y", pub("narratoria.jobs.echo.x.y"), true},
		{"game", "narratoria.outcomes.x.y.z", pub("narratoria.outcomes.x.y.z"), true},
		{"game", "narratoria.results.x.y", pub("narratoria.results.x.y"), true},
		{"game", "$KV.narratoria_sessions.p1", pub("$KV.narratoria_sessions.p1"), true},
		{"game", "$JS.API.DIRECT.GET.KV_narratoria_sessions.$KV.narratoria_sessions.p1", pub("$JS.API.DIRECT.GET.KV_narratoria_sessions.$KV.narratoria_sessions.p1"), true},
		{"game", "$JS.API.STREAM.DELETE.NARRATORIA_PLANS", pub("$JS.API.STREAM.DELETE.NARRATORIA_PLANS"), true},
		{"game", "_INBOX.>", sub("_INBOX.>"), true},
		{"game", "_INBOX_scheduler.>", sub("_INBOX_scheduler.>"), true},
		{"game", "narratoria.prompts.p1", pub("narratoria.prompts.p1"), false},
		// the literal narratoria.prompts.* is mapped to a subject with an
		// empty token, which the game may not publish: the server says so
		{"game", `"narratoria.prompts."`, pub("narratoria.prompts.*"), true},
		{"game", "narratoria.narrations.>", sub("narratoria.narrations.>"), false},
		{"game", "narratoria.prose.>", sub("narratoria.prose.>"), false},
		{"game", "narratoria.prose.p1", pub("narratoria.prose.p1"), true},
		{"game", "narratoria.planner.plan", pub("narratoria.planner.plan"), true},
		{"narrator", "narratoria.prose.p1", pub("narratoria.prose.p1"), false},
		{"narrator", "narratoria.planner.plan", sub("narratoria.planner.plan"), false},
		{"scheduler", "narratoria.prose.p1", pub("narratoria.prose.p1"), true},
		{"operator", "narratoria.planner.plan", pub("narratoria.planner.plan"), false},
		// skill worker
		{"worker_echo", "narratoria.results.x.y", pub("narratoria.results.x.y"), true},
		{"worker_echo", "narratoria.plans.x", pub("narratoria.plans.x"), true},
		{"worker_echo", "$JS.API.STREAM.DELETE.NARRATORIA_PLANS", pub("$JS.API.STREAM.DELETE.NARRATORIA_PLANS"), true},
		{"worker_echo", "$JS.API.STREAM.PURGE.NARRATORIA_NARRATIONS", pub("$JS.API.STREAM.PURGE.NARRATORIA_NARRATIONS"), true},
		{"worker_echo", "$KV.narratoria_sessions.p1", pub("$KV.narratoria_sessions.p1"), true},
		{"worker_echo", "_INBOX.>", sub("_INBOX.>"), true},
		{"worker_echo", "narratoria.outcomes.x.y.z", pub("narratoria.outcomes.x.y.z"), false},
		// the asset store: objects are named by their content and never
		// written over, so no worker needs a purge (one would wipe every
		// object); reading an object's chunks to check one already stored
		{"worker_echo", "$JS.API.STREAM.PURGE.OBJ_narratoria_assets", pub("$JS.API.STREAM.PURGE.OBJ_narratoria_assets"), true},
		{"worker_echo", "$JS.API.STREAM.DELETE.OBJ_narratoria_assets", pub("$JS.API.STREAM.DELETE.OBJ_narratoria_assets"), true},
		{"worker_echo", "$JS.API.DIRECT.GET.OBJ_narratoria_assets", pub("$JS.API.DIRECT.GET.OBJ_narratoria_assets"), false},
		{"worker_dice", "$JS.API.DIRECT.GET.OBJ_narratoria_assets", pub("$JS.API.DIRECT.GET.OBJ_narratoria_assets"), false},
		// outcomes sent to a scheduler as requests: a worker sends them, and
		// only a scheduler may take them
		{"worker_echo", "narratoria.outcomes.direct.x", pub("narratoria.outcomes.direct.x"), false},
		{"worker_echo", "narratoria.outcomes.direct.*", sub("narratoria.outcomes.direct.*"), true},
		{"narrator", "narratoria.outcomes.direct.*", sub("narratoria.outcomes.direct.*"), true},
		{"game", "narratoria.outcomes.direct.*", sub("narratoria.outcomes.direct.*"), true},
		{"game", "narratoria.outcomes.direct.x", pub("narratoria.outcomes.direct.x"), true},
		{"scheduler", "narratoria.outcomes.direct.*", sub("narratoria.outcomes.direct.*"), false},
		// a worker under a per-skill user takes only its skill's jobs
		{"worker_dice", "narratoria.jobs.dice-roller.>", sub("narratoria.jobs.dice-roller.>"), false},
		{"worker_dice", "narratoria.jobs.echo.>", sub("narratoria.jobs.echo.>"), true},
		{"worker_dice", "narratoria.jobs.>", sub("narratoria.jobs.>"), true},
		{"worker_dice", "$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-echo", pub("$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-echo"), true},
		{"worker_dice", "$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.spy", pub("$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.spy"), true},
		{"worker_dice", "$JS.API.CONSUMER.MSG.NEXT.NARRATORIA_JOBS.skill-echo", pub("$JS.API.CONSUMER.MSG.NEXT.NARRATORIA_JOBS.skill-echo"), true},
		{"worker_dice", "$KV.narratoria_skills.echo", pub("$KV.narratoria_skills.echo"), true},
		// its own durable, widened to another skill's jobs, or without the
		// filter in the subject (the body's filter would count)
		{"worker_dice", "$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller.narratoria.jobs.echo.>",
			pub("$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller.narratoria.jobs.echo.>"), true},
		{"worker_dice", "$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller.narratoria.jobs.>",
			pub("$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller.narratoria.jobs.>"), true},
		{"worker_dice", "$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller", pub("$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller"), true},
		{"worker_dice", "$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller.narratoria.jobs.dice-roller.>",
			pub("$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller.narratoria.jobs.dice-roller.>"), false},
		// another pool's replies: the jobs its pulls deliver
		{"worker_dice", "_INBOX_worker_echo.>", sub("_INBOX_worker_echo.>"), true},
		{"worker_dice", "_INBOX_worker.>", sub("_INBOX_worker.>"), true},
		// stored decisions: only a scheduler, after the approvals door checked
		// them, publishes them (schedulers apply them from there)
		{"game", "narratoria.decisions.p.t", pub("narratoria.decisions.p.t"), true},
		{"worker_dice", "narratoria.decisions.p.t", pub("narratoria.decisions.p.t"), true},
		{"narrator", "narratoria.decisions.p.t", pub("narratoria.decisions.p.t"), true},
		{"scheduler", "narratoria.decisions.p.t", pub("narratoria.decisions.p.t"), false},
		// progress goes through the scheduler (which checks the attempt's token): a worker publishes none
		{"worker_dice", "narratoria.progress.p1.x", pub("narratoria.progress.p1.x"), true},
		// the asset store: added to, never purged or deleted
		{"worker_dice", "$JS.API.STREAM.PURGE.OBJ_narratoria_assets", pub("$JS.API.STREAM.PURGE.OBJ_narratoria_assets"), true},
		{"worker_dice", "$JS.API.STREAM.MSG.DELETE.OBJ_narratoria_assets", pub("$JS.API.STREAM.MSG.DELETE.OBJ_narratoria_assets"), true},
		{"worker_dice", "$JS.API.STREAM.DELETE.OBJ_narratoria_assets", pub("$JS.API.STREAM.DELETE.OBJ_narratoria_assets"), true},
		{"worker_dice", "$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes", pub("$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes"), true},
		// the schedulers' outcome key, which would let a worker make any attempt's token
		{"worker_echo", "$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes", pub("$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes"), true},
		{"worker_echo", "$KV.narratoria_keys.outcomes", pub("$KV.narratoria_keys.outcomes"), true},
		{"narrator", "$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes", pub("$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes"), true},
		{"game", "$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes", pub("$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes"), true},
		{"scheduler", "$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes", pub("$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes"), false},
		// narrator
		{"narrator", "narratoria.jobs.echo.x.y", pub("narratoria.jobs.echo.x.y"), true},
		{"narrator", "$JS.API.STREAM.DELETE.NARRATORIA_PROMPTS", pub("$JS.API.STREAM.DELETE.NARRATORIA_PROMPTS"), true},
		{"narrator", "$JS.API.STREAM.PURGE.NARRATORIA_PROMPTS", pub("$JS.API.STREAM.PURGE.NARRATORIA_PROMPTS"), true},
		{"narrator", "$JS.API.CONSUMER.DELETE.NARRATORIA_PLANS.scheduler-plans", pub("$JS.API.CONSUMER.DELETE.NARRATORIA_PLANS.scheduler-plans"), true},
		{"narrator", "_INBOX_game.>", sub("_INBOX_game.>"), true},
		// scheduler
		{"scheduler", "$JS.API.STREAM.DELETE.NARRATORIA_PLANS", pub("$JS.API.STREAM.DELETE.NARRATORIA_PLANS"), true},
		{"scheduler", "$JS.API.STREAM.PURGE.NARRATORIA_RESULTS", pub("$JS.API.STREAM.PURGE.NARRATORIA_RESULTS"), true},
		// a finished plan's keys go key by key: markers on its own key
		// subjects, or, in a full bucket that refuses them, the plans
		// stream's purge request filtered by those subjects (the probe
		// filters on a key no plan has)
		{"scheduler", "$JS.API.STREAM.PURGE.KV_narratoria_plans", func(nc *nats.Conn) {
			_ = nc.Publish("$JS.API.STREAM.PURGE.KV_narratoria_plans", []byte(`{"filter":"$KV.narratoria_plans.p.no-such-plan"}`))
		}, false},
		{"scheduler", "$JS.API.STREAM.PURGE.NARRATORIA_APPROVALS", pub("$JS.API.STREAM.PURGE.NARRATORIA_APPROVALS"), true},
		{"scheduler", "$JS.API.STREAM.MSG.DELETE.KV_narratoria_plans", pub("$JS.API.STREAM.MSG.DELETE.KV_narratoria_plans"), true},
		{"scheduler", "$JS.API.STREAM.CREATE.NARRATORIA_X", pub("$JS.API.STREAM.CREATE.NARRATORIA_X"), true},
		{"scheduler", "narratoria.narrations.x", pub("narratoria.narrations.x"), true},
		{"scheduler", "narratoria.jobs.echo.x.y", pub("narratoria.jobs.echo.x.y"), false},
		// operator
		{"operator", "$JS.API.STREAM.DELETE.SCRATCH", pub("$JS.API.STREAM.DELETE.SCRATCH"), false},
		{"operator", "_INBOX.>", sub("_INBOX.>"), false},
	}
	probes := map[string]*probe{}
	for _, r := range table {
		p := probes[r.role]
		if p == nil {
			p = s.probe(t, r.role)
			probes[r.role] = p
		}
		require.Equal(t, r.deny, p.denied(t, r.subject, r.act), "%s on %s: denied should be %v", r.role, r.subject, r.deny)
	}
	// The operator really may administer: create and delete a stream.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "SCRATCH", Subjects: []string{"scratch.>"}})
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, "SCRATCH"))
	// The system account answers server reports.
	sys, err := nats.Connect(s.url, nats.UserInfo("sys", "pw-sys"))
	require.NoError(t, err)
	defer sys.Close()
	m, err := sys.Request("$SYS.REQ.SERVER.PING.JSZ", nil, 5*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(m.Data), "streams")
}

// checkWorkerCannotPurgeAssets: a worker credential cannot purge the asset
// store (one request would wipe every object): refused, and every object
// is still there. It can put other bytes under an object's name (any
// worker may write the store) — not with the client's Put, whose roll-up
// header the store refuses, but laid out as a worker lays an object out —
// and the game gets an error, never those bytes.
func checkWorkerCannotPurgeAssets(t *testing.T, ctx context.Context, s *secured, js jetstream.JetStream, c *client.Client, pic messages.Asset) {
	t.Helper()
	wobs, err := jetstream.New(s.connect(t, "worker_echo", nil))
	require.NoError(t, err)
	assetStream := func() jetstream.StreamState {
		st, err := js.Stream(ctx, "OBJ_"+messages.BucketAssets)
		require.NoError(t, err)
		return st.CachedInfo().State
	}
	before := assetStream()
	wst, err := wobs.Stream(ctx, "OBJ_"+messages.BucketAssets)
	require.NoError(t, err)
	denied, err := deniedWithin(ctx, wobs.Conn(), func(wctx context.Context) error { return wst.Purge(wctx) })
	require.Error(t, err, "a worker may not purge the asset store")
	require.True(t, denied, "the server refused the worker's purge as a permissions violation")
	require.Equal(t, before.Msgs, assetStream().Msgs, "nothing purged")
	data, err := c.Asset(ctx, pic)
	require.NoError(t, err, "the picture is still there")
	require.Contains(t, string(data), echoPicture)
	store, err := wobs.ObjectStore(ctx, messages.BucketAssets)
	require.NoError(t, err)
	fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = store.PutBytes(fctx, pic.Object, []byte("<svg>forged</svg>"))
	fcancel()
	require.ErrorContains(t, err, "rollup not permitted", "the client's Put rolls the name up, which the store refuses")
	forgeObject(t, ctx, wobs, pic.Object, []byte("<svg>forged</svg>"))
	forged, err := c.Asset(ctx, pic)
	require.ErrorIs(t, err, client.ErrAssetChanged)
	require.NotContains(t, string(forged), "forged")
}

// forgeObject puts data in the asset store under name as a worker lays an
// object out (its chunks, then its info; no roll-up header).
func forgeObject(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, data []byte) {
	t.Helper()
	id := nuid.Next()
	_, err := js.Publish(ctx, "$O."+messages.BucketAssets+".C."+id, data)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	info, err := json.Marshal(jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: name}, Bucket: messages.BucketAssets, NUID: id,
		Size: uint64(len(data)), Chunks: 1, Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "$O."+messages.BucketAssets+".M."+base64.URLEncoding.EncodeToString([]byte(name)), info)
	require.NoError(t, err)
}

// shellSkill is a skill with one script, a real sh script.
type shellSkill struct {
	name, description, prompt string
	// extra are more manifest fields, e.g. `"keywords":["a"]`.
	extra        string
	script, body string
}

// write writes the skill under skills: its manifest, prompt and script.
func (k shellSkill) write(t *testing.T, skills string) {
	t.Helper()
	sd := filepath.Join(skills, k.name)
	require.NoError(t, os.MkdirAll(filepath.Join(sd, "scripts"), 0o755))
	extra := ""
	if k.extra != "" {
		extra = "," + k.extra
	}
	man := fmt.Sprintf(`{"name":%q,"version":"1.0.0","description":%q%s,"scripts":[{"name":%q,"path":"scripts/%s"}]}`,
		k.name, k.description, extra, k.script, k.script)
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(man), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "prompt.md"), []byte(k.prompt), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", k.script), []byte(k.body), 0o755))
}

// writeDiceRollerSkill writes a skill named dice-roller for the per-skill
// worker user, in a folder of its own.
func writeDiceRollerSkill(t *testing.T) string {
	dir := testlog.OpenTempDir(t)
	shellSkill{name: "dice-roller", description: "rolls", prompt: "Rolls dice.", extra: `"capabilities":["dice"]`, script: "roll", body: `#!/bin/sh
cat > /dev/null
echo '{"version":"0","type":"done","ok":true,"output":{"total":4}}'
`}.write(t, dir)
	return dir
}

// echoPicture is the text of the echo skill's picture.
const echoPicture = "an echo in the hills"

// writeEchoSkill writes a narration skill in a folder of its own. It
// draws a picture too (data/echo.svg, an asset).
func writeEchoSkill(t *testing.T) string {
	dir := testlog.OpenTempDir(t)
	shellSkill{name: "echo", description: "echo", prompt: "Echoes the player.", extra: `"capabilities":["narration"]`, script: "say", body: `#!/bin/sh
cat > /dev/null
mkdir -p data
printf '<svg xmlns="http://www.w3.org/2000/svg"><text>` + echoPicture + `</text></svg>' > data/echo.svg
echo '{"version":"0","type":"asset","assetId":"pic","kind":"image","mediaType":"image/svg+xml","path":"data/echo.svg"}'
echo '{"version":"0","type":"ui_event","event":"progress","payload":{"percent":50}}'
echo '{"version":"0","type":"state_patch","patch":{"said":true}}'
echo '{"version":"0","type":"done","ok":true,"output":{"narration":"An echo answers."}}'
`}.write(t, dir)
	return dir
}
