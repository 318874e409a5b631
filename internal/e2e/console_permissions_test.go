package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/narratoria/runtime/internal/console"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// consoleAPI is the console's HTTP API under test, signed in as an
// operator by bearer token.
type consoleAPI struct {
	t     *testing.T
	url   string
	token string
}

// do sends a request and returns the status and the body.
func (a *consoleAPI) do(method, path, body string) (int, []byte) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(a.t, err)
	return res.StatusCode, b
}

// ok sends a request that must answer 200 and decodes its JSON into v
// (when not nil).
func (a *consoleAPI) ok(method, path, body string, v any) {
	a.t.Helper()
	code, b := a.do(method, path, body)
	require.Equal(a.t, http.StatusOK, code, "%s %s: %s", method, path, b)
	if v != nil {
		require.NoError(a.t, json.Unmarshal(b, v), "%s %s: %s", method, path, b)
	}
}

// TestPermissionsConsole runs the web console's whole HTTP API under the
// console user of the shipped accounts.conf, on a real nats-server, with
// every other component under its own user: login, the plans in flight
// and a plan's status, approve, deny, cancel, prompt, reset, rerun, a
// result and its inputs, skills with their health, the history, a
// session's narrations, an asset, the live events and the audit trail.
// Every call answers as it would under the operator, and no permission
// violation is logged. Then, action by action, what the console user may
// not do.
func TestPermissionsConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	s := startSecured(t, nil)
	log, rec := testlog.New(t)
	s.provision(t)
	s.pipeline(t, log)

	nc := s.connect(t, "console", log)
	token, tokenHash := console.NewToken()
	hash, err := bcrypt.GenerateFromPassword([]byte("correct horse battery"), bcrypt.MinCost)
	require.NoError(t, err)
	cs, err := console.New(nc, console.Options{Logger: log.With("component", "console"), Users: []console.User{
		{Name: "ops", Role: console.RoleOperator, TokenHash: tokenHash, PasswordHash: string(hash)}}})
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	api := &consoleAPI{t: t, url: web.URL, token: token}
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(90*time.Second))
	defer cancel()

	// A password login (audited).
	res, err := http.Post(web.URL+"/api/login", "application/json", strings.NewReader(`{"name":"ops","password":"correct horse battery"}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	// The live view of session c1, open before anything happens there.
	sse, err := http.NewRequestWithContext(ctx, http.MethodGet, web.URL+"/api/events?session=c1", nil)
	require.NoError(t, err)
	sse.Header.Set("Authorization", "Bearer "+token)
	stream, err := http.DefaultClient.Do(sse)
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	kinds := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stream.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if k, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				select {
				case kinds <- k:
				default:
				}
			}
		}
	}()
	seen := map[string]bool{}
	waitFor := func(kind string) {
		t.Helper()
		for !seen[kind] {
			select {
			case k := <-kinds:
				seen[k] = true
			case <-ctx.Done():
				t.Fatalf("no %s event on the console's live view (saw %v)", kind, seen)
			}
		}
	}

	// A plan whose tool waits for approval, sent as the operator: the
	// console lists it, shows its status and approves it.
	op := s.connect(t, "operator", nil)
	opjs, err := jetstream.New(op)
	require.NoError(t, err)
	plan := uuid.NewString()
	require.Eventually(t, func() bool {
		_, err := opjs.Publish(ctx, "narratoria.plans.c1",
			[]byte(`{"requestId":"`+plan+`","tools":[{"toolId":"a","toolPath":"echo/say","requiresApproval":true,"input":{"x":1}}]}`))
		return err == nil
	}, testlog.Budget(10*time.Second), 100*time.Millisecond)
	require.Eventually(t, func() bool {
		var list struct {
			Plans []messages.PlanSummary `json:"plans"`
		}
		api.ok(http.MethodGet, "/api/plans", "", &list)
		for _, p := range list.Plans {
			if p.PlanID == plan {
				return true
			}
		}
		return false
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "the console lists the plan in flight")
	var st messages.PlanStatus
	api.ok(http.MethodGet, "/api/plans/"+plan, "", &st)
	api.ok(http.MethodPost, "/api/plans/"+plan+"/tools/a/approve", `{"reason":"looks fine"}`, nil)
	waitFor("progress")
	waitFor("result")
	waitFor("script")

	// Its result, the inputs it ran with, and a rerun (a plan the console
	// publishes), which waits for approval again and is cancelled.
	var result messages.ExecutionResult
	require.Eventually(t, func() bool {
		code, b := api.do(http.MethodGet, "/api/results/"+plan, "")
		return code == http.StatusOK && json.Unmarshal(b, &result) == nil
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "the console reads the plan's result")
	require.True(t, result.Success, "%+v", result)
	api.ok(http.MethodGet, "/api/results/"+plan+"/inputs", "", nil)
	var rerun struct {
		PlanID string `json:"planId"`
	}
	api.ok(http.MethodPost, "/api/plans/"+plan+"/rerun", "", &rerun)
	require.Eventually(t, func() bool {
		code, _ := api.do(http.MethodGet, "/api/plans/"+rerun.PlanID, "")
		return code == http.StatusOK
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "the rerun is in flight")
	api.ok(http.MethodPost, "/api/plans/"+rerun.PlanID+"/cancel", `{"reason":"enough"}`, nil)
	// A decision on a plan that does not exist is refused, naming why.
	code, body := api.do(http.MethodPost, "/api/plans/"+uuid.NewString()+"/tools/b/deny", `{"reason":"no"}`)
	require.GreaterOrEqual(t, code, 400, "%s", body)
	require.Contains(t, string(body), "unknown plan")

	// A prompt: narrated, with the echo skill's picture, seen live.
	var sent struct {
		PromptID string `json:"promptId"`
	}
	api.ok(http.MethodPost, "/api/prompt", `{"sessionId":"c1","text":"hello from the console"}`, &sent)
	waitFor("narration")
	var narr struct {
		Narrations []messages.Narration `json:"narrations"`
	}
	require.Eventually(t, func() bool {
		api.ok(http.MethodGet, "/api/sessions/c1/narrations", "", &narr)
		for _, n := range narr.Narrations {
			if n.PromptID == sent.PromptID {
				return true
			}
		}
		return false
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "the console reads the session's narrations")
	var object string
	for _, n := range narr.Narrations {
		if n.PromptID == sent.PromptID && len(n.Assets) > 0 {
			object = n.Assets[0].Object
		}
	}
	require.NotEmpty(t, object, "the narration lists the echo skill's picture")
	code, pic := api.do(http.MethodGet, "/api/assets/"+object, "")
	require.Equal(t, http.StatusOK, code, "%s", pic)
	require.Contains(t, string(pic), echoPicture)

	// The registry with each skill's health in the session, the history,
	// a reset, the audit trail.
	var sk struct {
		Skills []struct {
			Name    string            `json:"name"`
			Workers []json.RawMessage `json:"workers"`
			Health  map[string]string `json:"health"`
			// Dispatch is the schedulers' fair dispatch of the skill (their
			// micro stats, which the console user may ask for).
			Dispatch *struct {
				Tenants []json.RawMessage `json:"tenants"`
			} `json:"dispatch"`
		} `json:"skills"`
	}
	api.ok(http.MethodGet, "/api/skills?session=c1", "", &sk)
	require.Len(t, sk.Skills, 1)
	require.Equal(t, "echo", sk.Skills[0].Name)
	require.NotEmpty(t, sk.Skills[0].Workers)
	require.Equal(t, "healthy", sk.Skills[0].Health["c1"])
	require.NotNil(t, sk.Skills[0].Dispatch, "the skill's fair dispatch, from the schedulers' status")
	require.NotEmpty(t, sk.Skills[0].Dispatch.Tenants, "the waits of the jobs it ran")
	require.Eventually(t, func() bool {
		var h struct {
			Plans []struct {
				Plan string `json:"planId"`
			} `json:"plans"`
		}
		api.ok(http.MethodGet, "/api/history?session=c1", "", &h)
		for _, p := range h.Plans {
			if p.Plan == plan {
				return true
			}
		}
		return false
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "the history has the finished plan")
	api.ok(http.MethodPost, "/api/sessions/c1/reset", "", nil)
	var audit struct {
		Entries []console.AuditEntry `json:"entries"`
	}
	api.ok(http.MethodGet, "/api/audit", "", &audit)
	actions := map[string]bool{}
	for _, e := range audit.Entries {
		if e.Action == "deny" && e.Status == http.StatusNotFound {
			// the decision on a plan that does not exist, refused
			require.Equal(t, "error", e.Outcome, "%+v", e)
		} else {
			require.Equal(t, "ok", e.Outcome, "%+v", e)
		}
		actions[e.Action] = true
	}
	for _, a := range []string{"login", "approve", "deny", "cancel", "prompt", "reset"} {
		require.True(t, actions[a], "the audit trail has %s: %v", a, actions)
	}

	require.False(t, rec.Contains("Permissions Violation"), "the console hit a permission it lacks")
	require.False(t, rec.Contains("permissions violation"))

	// What the console user may not do.
	p := s.probe(t, "console")
	for _, r := range []struct {
		subject string
		act     func(*nats.Conn)
	}{
		{"narratoria.jobs.echo.x.y", pub("narratoria.jobs.echo.x.y")},
		{"narratoria.outcomes.x.y.z", pub("narratoria.outcomes.x.y.z")},
		{"narratoria.results.x.y", pub("narratoria.results.x.y")},
		{"narratoria.narrations.x", pub("narratoria.narrations.x")},
		{"narratoria.progress.x.y", pub("narratoria.progress.x.y")},
		{"narratoria.narrate", pub("narratoria.narrate")},
		{"$KV.narratoria_sessions.c1", pub("$KV.narratoria_sessions.c1")},
		{"$JS.API.DIRECT.GET.KV_narratoria_sessions.$KV.narratoria_sessions.c1", pub("$JS.API.DIRECT.GET.KV_narratoria_sessions.$KV.narratoria_sessions.c1")},
		{"$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes", pub("$JS.API.DIRECT.GET.KV_narratoria_keys.$KV.narratoria_keys.outcomes")},
		{"$KV.narratoria_skills.echo", pub("$KV.narratoria_skills.echo")},
		{"$O.narratoria_assets.C.x", pub("$O.narratoria_assets.C.x")},
		{"$JS.API.STREAM.PURGE.OBJ_narratoria_assets", pub("$JS.API.STREAM.PURGE.OBJ_narratoria_assets")},
		{"$JS.API.STREAM.PURGE.NARRATORIA_AUDIT", pub("$JS.API.STREAM.PURGE.NARRATORIA_AUDIT")},
		{"$JS.API.STREAM.DELETE.NARRATORIA_AUDIT", pub("$JS.API.STREAM.DELETE.NARRATORIA_AUDIT")},
		{"$JS.API.STREAM.MSG.DELETE.NARRATORIA_AUDIT", pub("$JS.API.STREAM.MSG.DELETE.NARRATORIA_AUDIT")},
		{"$JS.API.STREAM.CREATE.NARRATORIA_X", pub("$JS.API.STREAM.CREATE.NARRATORIA_X")},
		{"$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.spy", pub("$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.spy")},
		{"$JS.API.CONSUMER.DELETE.NARRATORIA_PLANS.scheduler-plans-0", pub("$JS.API.CONSUMER.DELETE.NARRATORIA_PLANS.scheduler-plans-0")},
		{"narratoria.cancel.x", pub("narratoria.cancel.x")},
		{"narratoria.control.>", sub("narratoria.control.>")},
		{"narratoria.narrate", sub("narratoria.narrate")},
		{"narratoria.jobs.>", sub("narratoria.jobs.>")},
		{"narratoria.outcomes.direct.*", sub("narratoria.outcomes.direct.*")},
		{"_INBOX.>", sub("_INBOX.>")},
		{"_INBOX_game.>", sub("_INBOX_game.>")},
	} {
		require.True(t, p.denied(t, r.subject, r.act), "the console user may not touch %s", r.subject)
	}
	for _, allowed := range []string{"narratoria.prompts.c1", "narratoria.approvals.x.y", "narratoria.audit.login"} {
		require.False(t, p.denied(t, allowed, pub(allowed)), "the console user publishes %s", allowed)
	}
}
