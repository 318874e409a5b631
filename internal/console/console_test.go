package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/internal/testskills"
	"github.com/narratoria/runtime/pkg/messages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testlog.UpstreamLeaks()...) }

// env is a pipeline (worker with in-process skills teller, step and nap,
// scheduler, narrator) and a console in front of it.
type env struct {
	srv *natstest.Server
	web *httptest.Server
	// token is the bearer token of the operator "ops" (testUsers).
	token string
}

// The test logins: ops (operator, by token opsToken), gm (game master)
// and viewer (viewer), by password testPassword.
var (
	opsToken, opsTokenHash = NewToken()
	testPassword           = "correct horse battery"
	// At bcrypt's lowest cost: the real cost (HashPassword's) takes a
	// second a check under the race detector.
	testPasswordHash = func() string {
		h, err := bcrypt.GenerateFromPassword([]byte(testPassword), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		return string(h)
	}()
)

func testUsers() []User {
	return []User{
		{Name: "ops", Role: RoleOperator, TokenHash: opsTokenHash, PasswordHash: testPasswordHash},
		{Name: "gm", Role: RoleGameMaster, PasswordHash: testPasswordHash},
		{Name: "viewer", Role: RoleViewer, PasswordHash: testPasswordHash},
	}
}

// authed adds the operator's bearer token to a request.
func authed(req *http.Request) *http.Request {
	req.Header.Set("Authorization", "Bearer "+opsToken)
	return req
}

// dozeFor is how long the doze skill sleeps.
const dozeFor = 300 * time.Millisecond

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := natstest.Start(t)
	log, _ := testlog.New(t)
	dir := t.TempDir()
	skills := map[string]runner.Func{
		"teller": func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"narration":"The teller speaks."}`)})
		},
		"roll": func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"total":17,"rolls":[15]}`)})
		},
		"step": func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			_ = emit(&messages.LogEvent{Level: "info", Message: "stepping"})
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"stepped":true}`)})
		},
		"doze": func(ctx context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			select {
			case <-time.After(dozeFor):
			case <-ctx.Done():
				return ctx.Err()
			}
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"dozed":true}`)})
		},
		"nap": func(ctx context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			_ = emit(&messages.UIEvent{Event: "progress", Payload: json.RawMessage(`{"percent":30}`)})
			<-ctx.Done()
			return ctx.Err()
		},
	}
	ip := testskills.WriteMap(t, dir, "teller", skills)
	// The sample skill scene-art, a real script that draws an SVG, run by
	// plans sent directly: its keywords and examples are left out, so the
	// rule planner does not add it to the prompts above.
	art := filepath.Join(dir, "scene-art")
	require.NoError(t, os.CopyFS(art, os.DirFS(filepath.Join("..", "..", "skills", "scene-art"))))
	var man map[string]any
	b, err := os.ReadFile(filepath.Join(art, "skill.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &man))
	for _, k := range []string{"keywords", "examples", "capabilities"} {
		delete(man, k)
	}
	b, _ = json.Marshal(man)
	require.NoError(t, os.WriteFile(filepath.Join(art, "skill.json"), b, 0o644))
	wk, err := skillworker.New(srv.Connect(t), skillworker.Config{SkillsDir: dir, Concurrency: 8, WatchInterval: -1},
		skillworker.Options{Logger: log, Runner: mixedRunner{ip: ip, process: "scene-art"}, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, wk.Start(context.Background()))
	t.Cleanup(wk.Stop)
	sch, err := scheduler.New(srv.Connect(t), scheduler.Config{}, scheduler.Options{Logger: log, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, sch.Start(context.Background()))
	t.Cleanup(sch.Stop)
	require.Eventually(t, sch.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	nar, err := narrator.New(srv.Connect(t), narrator.Config{PlanTimeoutMs: 30_000}, narrator.Options{Logger: log, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, nar.Start(context.Background()))
	t.Cleanup(nar.Stop)
	cs, err := New(srv.Connect(t), Options{Logger: log, Users: testUsers()})
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	return &env{srv: srv, web: web, token: opsToken}
}

// mixedRunner runs the skill named process as a real process and the
// others in-process.
type mixedRunner struct {
	ip      *runner.InProcessRunner
	process string
}

func (m mixedRunner) Run(ctx context.Context, inv runner.Invocation, on runner.EventFunc) runner.Result {
	if inv.Skill == m.process {
		return (&runner.ProcessRunner{}).Run(ctx, inv, on)
	}
	return m.ip.Run(ctx, inv, on)
}

// getUntil GETs path until ok holds for the answer (200 each time) or a
// budget of 5 s ends, and returns the last answer: for what the console
// reads from a stream or an index that follows a live event by a moment.
func (e *env) getUntil(t *testing.T, path string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(testlog.Budget(5 * time.Second))
	for {
		code, out := e.call(t, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, code, out)
		if ok(out) || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, e.web.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(authed(req))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// sse reads server-sent events of kind from /api/events until match says so.
type sse struct {
	events chan [2]string
	cancel context.CancelFunc
}

func (e *env) events(t *testing.T, session string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.web.URL+"/api/events?session="+session, nil)
	resp, err := http.DefaultClient.Do(authed(req))
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sse{events: make(chan [2]string, 1024), cancel: cancel}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		var kind string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				select {
				case s.events <- [2]string{kind, strings.TrimPrefix(line, "data: ")}:
				default:
				}
			}
		}
	}()
	t.Cleanup(cancel)
	return s
}

func (s *sse) wait(t *testing.T, kind string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-s.events:
			var m map[string]any
			if ev[0] == kind && json.Unmarshal([]byte(ev[1]), &m) == nil && match(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s event matched", kind)
		}
	}
}

// TestConsoleAPI: a prompt sent through the console is narrated and seen
// live; a plan in flight is listed, shown, cancelled and its result read;
// an approval through the console lets a gate run; bad input is a 4xx.
func TestConsoleAPI(t *testing.T) {
	e := newEnv(t)
	live := e.events(t, "web")
	// A prompt the narrator would drop is refused at once, with its words.
	code, out := e.call(t, http.MethodPost, "/api/prompt", `{"sessionId":"web","text":"`+strings.Repeat("x", 5000)+`"}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, fmt.Sprint(out), "is 5000 characters; the limit is 4000")
	code, out = e.call(t, http.MethodPost, "/api/prompt", `{"sessionId":"web","text":"step"}`)
	require.Equal(t, http.StatusOK, code, out)
	require.NotEmpty(t, out["promptId"])
	live.wait(t, "progress", func(m map[string]any) bool { return m["state"] == "started" && m["sessionId"] == "web" })
	live.wait(t, "script", func(m map[string]any) bool { return m["toolId"] != nil })
	n := live.wait(t, "narration", func(m map[string]any) bool { return m["promptId"] == out["promptId"] })

	// The session's narrations and its plans, read from the streams; a
	// bad search names its parameter.
	// The live event can come a moment before the stream has stored the
	// narration (the narrator's publish is not acknowledged yet), and
	// before the history index has read the plan's result.
	hist := e.getUntil(t, "/api/sessions/web/narrations", func(h map[string]any) bool { ns, _ := h["narrations"].([]any); return len(ns) > 0 })
	require.NotEmpty(t, hist["narrations"])
	hist = e.getUntil(t, "/api/history?session=web&state=succeeded", func(h map[string]any) bool { return h["total"] == 1.0 })
	require.EqualValues(t, 1, hist["total"], hist)
	for q, want := range map[string]string{"from=yesterday": "from:", "limit=1000": "limit:", "before=x": "before:"} {
		code, hist = e.call(t, http.MethodGet, "/api/history?"+q, "")
		require.Equal(t, http.StatusBadRequest, code, q)
		require.Contains(t, hist["error"], want, q)
	}
	require.Contains(t, n["text"], "The teller speaks.")

	// A plan that naps: list, status, cancel, result.
	planID := uuid.NewString()
	b, _ := json.Marshal(map[string]any{"requestId": planID, "tools": []any{map[string]any{"toolId": "z", "toolPath": "nap/run"}}})
	_, err := e.srv.JS.Publish(t.Context(), "narratoria.plans.web", b)
	require.NoError(t, err)
	live.wait(t, "progress", func(m map[string]any) bool { return m["planId"] == planID && m["progress"] != nil })
	code, out = e.call(t, http.MethodGet, "/api/plans?session=web", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, toJSON(out), planID)
	code, out = e.call(t, http.MethodGet, "/api/plans/"+planID, "")
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "running", out["tools"].([]any)[0].(map[string]any)["state"])
	code, _ = e.call(t, http.MethodPost, "/api/plans/"+planID+"/cancel", `{"reason":"from the console"}`)
	require.Equal(t, http.StatusOK, code)
	res := live.wait(t, "result", func(m map[string]any) bool { return m["planId"] == planID })
	require.Equal(t, messages.ReasonCancelled, res["failureReason"])
	code, out = e.call(t, http.MethodGet, "/api/results/"+planID, "")
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, planID, out["planId"])
	require.Eventually(t, func() bool {
		code, out := e.call(t, http.MethodGet, "/api/plans/"+planID, "")
		return code == http.StatusOK && out["phase"] == "published" && out["result"] != nil
	},
		// Generous: under the whole suite's load a status call can take
		// seconds (the owner waits up to 5 s for an actor while the record
		// still says finished); it took over 5 s once.
		20*time.Second, 20*time.Millisecond, "a finished plan's status comes from its result")
	code, out = e.call(t, http.MethodPost, "/api/plans/"+planID+"/cancel", `{}`)
	require.Equal(t, http.StatusConflict, code, "a finished plan cannot be cancelled: %v", out)
	require.Contains(t, out["error"], "already finished")
	code, _ = e.call(t, http.MethodGet, "/api/plans/"+uuid.NewString(), "")
	require.Equal(t, http.StatusNotFound, code, "an unknown plan")

	// An approval gate.
	planID = uuid.NewString()
	b, _ = json.Marshal(map[string]any{"requestId": planID, "tools": []any{map[string]any{"toolId": "g", "toolPath": "step/run", "requiresApproval": true}}})
	_, err = e.srv.JS.Publish(t.Context(), "narratoria.plans.web", b)
	require.NoError(t, err)
	live.wait(t, "progress", func(m map[string]any) bool { return m["planId"] == planID && m["state"] == "awaiting_approval" })
	code, _ = e.call(t, http.MethodPost, "/api/plans/"+planID+"/tools/g/approve", `{}`)
	require.Equal(t, http.StatusOK, code)
	res = live.wait(t, "result", func(m map[string]any) bool { return m["planId"] == planID })
	require.Equal(t, true, res["success"])

	code, out = e.call(t, http.MethodGet, "/api/skills?session=web", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, toJSON(out), `"name":"nap"`)
	require.Contains(t, toJSON(out), `"healthy"`)
	code, _ = e.call(t, http.MethodPost, "/api/sessions/web/reset", "")
	require.Equal(t, http.StatusOK, code)

	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{http.MethodGet, "/api/plans/not-a-plan", "", http.StatusBadRequest},
		{http.MethodGet, "/api/results/" + uuid.NewString(), "", http.StatusNotFound},
		{http.MethodPost, "/api/prompt", `{"sessionId":"a b","text":"x"}`, http.StatusBadRequest},
		{http.MethodPost, "/api/prompt", `not json`, http.StatusBadRequest},
		{http.MethodGet, "/api/skills?session=a%20b", "", http.StatusBadRequest},
		{http.MethodGet, "/api/events?session=a%20b", "", http.StatusBadRequest},
	} {
		code, out := e.call(t, c.method, c.path, c.body)
		require.Equal(t, c.want, code, "%s %s: %v", c.method, c.path, out)
		require.NotEmpty(t, out["error"], "%s %s names the problem", c.method, c.path)
	}
	code, _ = e.call(t, http.MethodGet, "/", "")
	require.Equal(t, http.StatusOK, code, "the page is served")
	live.cancel()
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCrossOriginStateChangesRefused: a state-changing request a browser
// marks as coming from another site is refused with 403 before it reaches
// the API; the same request from the console's own page goes through (here
// to a 4xx of the API itself, for its bad body), and reads stay open.
func TestCrossOriginStateChangesRefused(t *testing.T) {
	srv := natstest.Start(t)
	cs, err := New(srv.NC, Options{Users: testUsers()})
	require.NoError(t, err)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	post := func(path string, headers map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, web.URL+path, strings.NewReader("text=hi"))
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(authed(req))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/api/prompt", "/api/sessions/s1/reset", "/api/plans/00000000-0000-4000-8000-000000000001/cancel"} {
		require.Equal(t, http.StatusForbidden, post(path, map[string]string{"Sec-Fetch-Site": "cross-site"}), path)
		require.Equal(t, http.StatusForbidden, post(path, map[string]string{"Origin": "http://evil.example"}), path)
	}
	require.NotEqual(t, http.StatusForbidden, post("/api/prompt", map[string]string{"Sec-Fetch-Site": "same-origin"}), "the console's own page")
	req, _ := http.NewRequest(http.MethodGet, web.URL+"/api/skills", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(authed(req))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "reads stay open")
}

// TestHostChecked: a request whose Host header names a host the console
// does not answer to — what a page served from a rebinding DNS name sends —
// is refused with 421 whatever its method; IP addresses, localhost and the
// configured names are answered.
func TestHostChecked(t *testing.T) {
	srv := natstest.Start(t)
	cs, err := New(srv.NC, Options{AllowedHosts: []string{"Console.Example.org"}, Users: testUsers()})
	require.NoError(t, err)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	get := func(host string) int {
		req, _ := http.NewRequest(http.MethodGet, web.URL+"/api/skills", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(authed(req))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:7420", "localhost.attacker.example", "console.example.org.evil"} {
		require.Equal(t, http.StatusMisdirectedRequest, get(host), host)
	}
	for _, host := range []string{"127.0.0.1:7420", "localhost:7420", "[::1]:7420", "10.1.2.3", "console.example.org", "CONSOLE.example.org.:443"} {
		require.Equal(t, http.StatusOK, get(host), host)
	}
	req, _ := http.NewRequest(http.MethodPost, web.URL+"/api/prompt", strings.NewReader(`{"sessionId":"s","text":"hi"}`))
	req.Host = "rebind.attacker.example:7420"
	resp, err := http.DefaultClient.Do(authed(req))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "a state change for another host")
}
