package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
	"github.com/stretchr/testify/require"
)

// chromium finds Debian's chromium (or another Chrome) on PATH.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts headless Chromium on a fresh profile for t.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("chromium not installed: the console's browser tests are skipped (apt-get install chromium; .ci/run does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	ctx, tcancel := context.WithTimeout(ctx, testlog.Budget(90*time.Second))
	t.Cleanup(tcancel)
	// Every page notes what its Content Security Policy blocked
	// (noCSPViolations reads it).
	_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.__csp = []; document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`})
	require.NoError(t, err)
	return ctx
}

// noCSPViolations checks the page's Content Security Policy blocked
// nothing it needs: no inline script or style, no other origin.
func noCSPViolations(t *testing.T, ctx context.Context) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.__csp || ['no record'])`))
	require.NoError(t, err)
	require.Equal(t, "[]", got, "the page's CSP blocked something")
}

// screenshot stores a PNG of the page under the test's temp dir (and under
// $NARRATORIA_SCREENSHOTS when set, to refresh the docs' images).
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Greater(t, len(png), 1000)
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	if dir := os.Getenv("NARRATORIA_SCREENSHOTS"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}
	return path
}

// publish sends a plan on the session and returns its ID.
func (e *env) publish(t *testing.T, tools ...map[string]any) string {
	t.Helper()
	id := uuid.NewString()
	b, _ := json.Marshal(map[string]any{"requestId": id, "tools": tools})
	_, err := e.srv.JS.Publish(t.Context(), "narratoria.plans.web", b)
	require.NoError(t, err)
	return id
}

func tool(id, path string, deps ...string) map[string]any {
	return map[string]any{"toolId": id, "toolPath": path, "dependencies": append([]string{}, deps...)}
}

// waitNodes waits until the selected plan's DAG has n nodes, all in state.
func waitNodes(n int, state string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const ns = document.querySelectorAll('#dag g.node'); return ns.length === %d && [...ns].every(g => g.dataset.state === %q); })()`, n, state)
	return poll(js)
}

// clickJS clicks an element of a live list or graph by script (a click
// event, which SVG nodes take too): a click at its coordinates may land on
// a neighbour when an event re-orders the list, or on a node the graph
// has just drawn again.
func clickJS(sel string) chromedp.Action[chromedp.Void] {
	return poll(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.dispatchEvent(new MouseEvent('click', {bubbles: true})); return true; })()`, sel))
}

// poll waits until a JavaScript expression is true.
func poll(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(testlog.Budget(20*time.Second)))
}

// TestConsoleInBrowser drives the console in headless Chromium: a prompt
// sent from the page is narrated and its plan drawn with every tool
// reaching success; a diamond plan is drawn and finishes (screenshot); a
// tool waiting for approval is shown (screenshot) and approved from the
// page; a sleeping plan is cancelled from the page.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	e := newEnv(t)
	ctx := browser(t) // stopped before the console, so no page holds its event stream open
	t.Cleanup(func() {
		if t.Failed() {
			text, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body.innerText + "\n" + document.getElementById('dag').outerHTML`))
			t.Log("page at failure:\n" + text)
		}
	})
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.web.URL+"/"),
		logIn("ops"),
		chromedp.WaitVisible(chromedp.CSS("#send-prompt")),
		poll(`document.getElementById('live').textContent === 'live'`),
		chromedp.SetValue(chromedp.CSS("#session"), "web"),
		chromedp.SendKeys(chromedp.CSS("#prompt-text"), "step"),
		chromedp.Click(chromedp.CSS("#send-prompt")),
		waitNodes(2, "success"),
		chromedp.WaitVisible(chromedp.CSS(`#sessions li.narration`)),
		poll(`document.querySelector('#sessions li.narration a.attempt')?.textContent.startsWith('attempt 1')`),
		poll(`[...document.querySelectorAll('#skills .chip')].some(c => / \d+\/8 busy$/.test(c.textContent))`),
	))
	narration, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#sessions li.narration .text`)))
	require.NoError(t, err)
	require.Contains(t, narration, "The teller speaks.")
	// The narration shows the player's words, and so does its plan's card
	// in the history, which took the plan in live, without a search.
	require.NoError(t, chromedp.Do(ctx,
		poll(`document.querySelector('#sessions li.narration .prompt')?.textContent === '“step”'`),
		poll(`[...document.querySelectorAll('#history-list li.hist-item .prompt')].some(p => p.textContent === '“step”')`),
	))

	// A diamond: a -> (b, c) -> d.
	diamond := e.publish(t, tool("a", "step/run"), tool("b", "step/run", "a"), tool("c", "step/run", "a"), tool("d", "step/run", "b", "c"))
	sel := fmt.Sprintf(`li.plan-item[data-plan-id=%q]`, diamond)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		clickJS(sel),
		waitNodes(4, "success"),
		clickJS(`#dag g.node[data-tool-id="d"]`),
		poll(`document.getElementById('tool-output').textContent.includes('stepped')`),
		// Its transitions (running, then success) and the
		// input it ran with.
		poll(`document.querySelectorAll('#tool-history li.transition').length >= 2`),
		poll(`document.querySelector('#tool-history li.transition[data-state="success"]') !== null`),
		poll(`document.getElementById('tool-input').textContent.trim() !== '' && !document.getElementById('tool-input').textContent.includes('shown once')`),
	))
	screenshot(t, ctx, "console-diamond.png")
	// Run it again from the page: a new plan, opened at once, succeeds.
	require.NoError(t, chromedp.Do(ctx,
		poll(`!document.getElementById('rerun-plan').disabled`),
		chromedp.Click(chromedp.CSS("#rerun-plan")),
		poll(fmt.Sprintf(`location.hash.startsWith('#/plans/') && location.hash !== '#/plans/%s'`, diamond)),
		waitNodes(4, "success"),
	))

	// An approval gate, approved from the page. Before anyone approves,
	// the page shows what the gate would run with: its reference to the
	// roll's output resolved (issue 47); so does `plan status --json`.
	gate := e.publish(t, tool("roll", "roll/run"), map[string]any{"toolId": "gate", "toolPath": "step/run", "requiresApproval": true,
		"dependencies": []string{"roll"}, "input": map[string]any{"bonus": "$roll.total", "why": "the lock"}}, tool("after", "step/run", "gate"))
	sel = fmt.Sprintf(`li.plan-item[data-plan-id=%q]`, gate)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		clickJS(sel),
		poll(`document.querySelector('#dag g.node[data-tool-id="gate"]')?.dataset.state === 'awaiting_approval'`),
		clickJS(`#dag g.node[data-tool-id="gate"]`),
		chromedp.WaitVisible(chromedp.CSS("#approve-tool")),
		poll(`document.getElementById('tool-input').dataset.awaiting === 'true'`),
	))
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('tool-input').textContent`))
	require.NoError(t, err)
	require.JSONEq(t, `{"bonus":17,"why":"the lock"}`, shown, "the waiting tool's input, the roll's total in it")
	out, err := exec.Command(natstest.Build(t, "../../cmd/narratoria"), "plan", "status", "--json", "--nats-url", e.srv.URL(), gate).Output()
	require.NoError(t, err, "plan status --json")
	var st messages.PlanStatus
	require.NoError(t, json.Unmarshal(out, &st), string(out))
	require.Equal(t, messages.ToolAwaitingApproval, st.Tools[1].State)
	require.JSONEq(t, `{"bonus":17,"why":"the lock"}`, string(st.Tools[1].Input))
	screenshot(t, ctx, "console-approval.png")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#approve-tool")),
		waitNodes(3, "success"),
	))
	approvalInputWhileLoading(t, ctx, e)

	// The sample skill scene-art draws a picture: the page shows it
	// inline, fetched from the asset object store.
	art := e.publish(t, map[string]any{"toolId": "art", "toolPath": "scene-art/sketch-scene", "input": map[string]any{"prompt": "a misty harbour"}})
	sel = fmt.Sprintf(`li.plan-item[data-plan-id=%q]`, art)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		clickJS(sel),
		waitNodes(1, "success"),
		clickJS(`#dag g.node[data-tool-id="art"]`),
		poll(`[...document.querySelectorAll('#tool-assets img.asset')].some(i => i.complete && i.naturalWidth === 480)`),
	))

	// A sleeping plan, cancelled from the page.
	nap := e.publish(t, tool("z", "nap/run"))
	sel = fmt.Sprintf(`li.plan-item[data-plan-id=%q]`, nap)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		clickJS(sel),
		poll(`document.querySelector('#dag g.node[data-tool-id="z"]')?.dataset.state === 'running'`),
		poll(`!document.getElementById('cancel-plan').disabled`),
		chromedp.Click(chromedp.CSS("#cancel-plan")),
		waitNodes(1, "cancelled"),
	))
	errText, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#error")))
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(errText), "no error shown")

	// 250 plans: the list is paged (100 a page) and the page keeps
	// answering while their events pour in.
	for i := range 250 {
		b, _ := json.Marshal(map[string]any{"requestId": uuid.NewString(), "tools": []any{tool("s", "step/run")}})
		_, err := e.srv.JS.PublishAsync(fmt.Sprintf("narratoria.plans.many%d", i%10), b)
		require.NoError(t, err)
	}
	<-e.srv.JS.PublishAsyncComplete()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](`Number(document.getElementById('plans-count').textContent) >= 254`, chromedp.WithPollingTimeout(testlog.Budget(40*time.Second))),
		poll(`document.querySelectorAll('#plans li.plan-item').length === 100`),
		chromedp.Click(chromedp.CSS("#plans-next")),
		poll(`document.querySelectorAll('#plans li.plan-item').length === 100 && !document.getElementById('plans-prev').disabled`),
	))
	noCSPViolations(t, ctx)
}

// logIn signs in on the page's login form as name (password
// testPassword) and waits for the console.
func logIn(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS("#login-name")),
		chromedp.SetValue(chromedp.CSS("#login-name"), name),
		chromedp.SetValue(chromedp.CSS("#login-password"), testPassword),
		chromedp.Click(chromedp.CSS("#login-submit")),
		poll(fmt.Sprintf(`document.getElementById('whoami').textContent.startsWith('signed in as %s ')`, name)),
	)
}

// TestRolesInBrowser: without a login the API answers 401 and the page
// shows the login form; a viewer sees a tool awaiting approval but is
// offered no approve button, and a forced approval gets 403 naming the
// role; a game master approves it from the page, the plan finishes, the
// scheduler records the game master as the approver, and the audit panel
// (and the audit stream) name the game master.
func TestRolesInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	e := newEnv(t)
	ctx := browser(t)
	t.Cleanup(func() {
		if t.Failed() {
			text, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body.innerText`))
			t.Log("page at failure:\n" + text)
		}
	})
	status := func(method, path string) string {
		return fmt.Sprintf(`fetch(%q, {method: %q, headers: {"Content-Type": "application/json"}, body: %s}).then(async r => r.status + " " + (await r.text()))`,
			path, method, map[bool]string{true: `"{}"`, false: "undefined"}[method == "POST"])
	}
	// (a) No login: the form, and 401 from the API.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.web.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#login-name")),
	))
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('send-prompt').offsetParent === null`))
	require.NoError(t, err)
	require.True(t, hidden, "the console is not shown before a login")
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](status("GET", "/api/plans"), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(got, "401 "), got)

	// (b) A viewer: the gate is shown, approving is not offered, and
	// forced it is refused.
	gate := e.publish(t, map[string]any{"toolId": "gate", "toolPath": "step/run", "requiresApproval": true})
	sel := fmt.Sprintf(`li.plan-item[data-plan-id=%q]`, gate)
	require.NoError(t, chromedp.Do(ctx,
		logIn("viewer"),
		poll(`document.getElementById('whoami').textContent === 'signed in as viewer (viewer)'`),
		chromedp.WaitVisible(chromedp.CSS(sel)),
		clickJS(sel),
		poll(`document.querySelector('#dag g.node[data-tool-id="gate"]')?.dataset.state === 'awaiting_approval'`),
		clickJS(`#dag g.node[data-tool-id="gate"]`),
		poll(`document.getElementById('tool-title').textContent.startsWith('gate')`),
	))
	offered, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('button')].filter(b => b.offsetParent !== null).map(b => b.id).join(' ')`))
	require.NoError(t, err)
	for _, id := range []string{"approve-tool", "deny-tool", "cancel-plan", "send-prompt", "reset-session"} {
		require.NotContains(t, offered, id, "a viewer is not offered %s", id)
	}
	require.Contains(t, offered, "logout")
	got, err = chromedp.Run(ctx, chromedp.Evaluate[string](status("POST", "/api/plans/"+gate+"/tools/gate/approve"), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(got, "403 "), got)
	require.Contains(t, got, "approve needs the game master role")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#logout")),
		chromedp.WaitVisible(chromedp.CSS("#login-name")),
	))

	// (c) A game master approves from the page.
	require.NoError(t, chromedp.Do(ctx,
		logIn("gm"),
		chromedp.WaitVisible(chromedp.CSS(sel)),
		clickJS(sel),
		poll(`document.querySelector('#dag g.node[data-tool-id="gate"]')?.dataset.state === 'awaiting_approval'`),
		clickJS(`#dag g.node[data-tool-id="gate"]`),
		chromedp.WaitVisible(chromedp.CSS("#approve-tool")),
		chromedp.Click(chromedp.CSS("#approve-tool")),
		waitNodes(1, "success"),
		poll(fmt.Sprintf(`[...document.querySelectorAll('#audit li[data-action="approve"]')].some(li => li.dataset.user === 'gm' && li.textContent.includes(%q))`, gate[:8])),
	))
	screenshot(t, ctx, "console-audit.png")
	// The refused logins' page of the panel answers too.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.getElementById('audit-kind').value = 'logins'; document.getElementById('audit-kind').dispatchEvent(new Event('change'))`),
		poll(`!document.querySelector('#audit li[data-action="approve"]')`),
	))
	errText, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#error")))
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(errText), "no error shown")
	noCSPViolations(t, ctx)
	st, err := e.srv.JS.Stream(t.Context(), messages.StreamAudit)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), "narratoria.audit.approve")
	require.NoError(t, err)
	var entry AuditEntry
	require.NoError(t, json.Unmarshal(m.Data, &entry))
	require.Equal(t, "gm", entry.User)
	require.Equal(t, RoleGameMaster, entry.Role)
	require.Equal(t, "ok", entry.Outcome)
	require.Equal(t, gate, entry.Plan)
	require.Equal(t, "gate", entry.Tool)
	ap, err := e.srv.JS.Stream(t.Context(), messages.StreamApprovals)
	require.NoError(t, err)
	dm, err := ap.GetLastMsgForSubject(t.Context(), "narratoria.decisions."+gate+".gate")
	require.NoError(t, err)
	var dec messages.Approval
	require.NoError(t, json.Unmarshal(dm.Data, &dec))
	require.Equal(t, "gm", dec.By, "the scheduler records the signed-in user")
}

// TestCrossOriginFormRefusedInBrowser: a page on another origin that posts
// a text/plain form shaped as JSON to the console, in a real browser, is
// refused — no prompt is stored — and so is its reset; the console's own
// page still sends prompts (TestConsoleInBrowser).
func TestCrossOriginFormRefusedInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	srv := natstest.Start(t)
	cs, err := New(srv.NC, Options{})
	require.NoError(t, err)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	ctx := browser(t)
	// The attacker's page: its name "{"sessionId":"xsite","text":"pwned","x":"" and value "}"
	// make the text/plain body one JSON object.
	page := `<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="` + web.URL + `/api/prompt">
<input type="hidden" name='{"sessionId":"xsite","text":"pwned","x":"' value='"}'>
</form>
<form id="r" method="POST" enctype="text/plain" action="` + web.URL + `/api/sessions/xsite/reset" target="resetframe">
<input type="hidden" name="x" value="y"></form><iframe name="resetframe"></iframe>
<script>document.getElementById('r').submit(); setTimeout(() => document.getElementById('f').submit(), 300);</script>
</body></html>`
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(attacker.Close)
	// Chromium treats 127.0.0.1 and localhost as different sites.
	attackerURL := strings.Replace(attacker.URL, "127.0.0.1", "localhost", 1)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(attackerURL+"/")))
	// The page navigates itself to the console's answer: read it once there
	// (an evaluation racing the navigation is simply tried again).
	var body string
	require.Eventually(t, func() bool {
		at, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href.startsWith(`+fmt.Sprintf("%q", web.URL)+`) ? document.body.innerText : ""`))
		body = at
		return err == nil && at != ""
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "the form was posted")
	require.Contains(t, strings.ToLower(body), "cross-origin", "the console's refusal is what the browser shows")
	st, err := srv.JS.Stream(t.Context(), messages.StreamPrompts)
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "no prompt stored")
}

// TestHistoryInBrowser: 1,000 plans finished before the page opened are
// all findable in the history, by session and by state, page by page;
// a plan's URL opens it with its timeline, which shows how long each tool
// really ran.
func TestHistoryInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	e := newEnv(t)
	ctx := t.Context()
	bySession := map[string][]string{}
	failed := []string{}
	for i := range 1000 {
		id := uuid.NewString()
		session := fmt.Sprintf("hist%d", i%10)
		path := "step/run"
		if i%5 == 0 {
			path = "step/nope" // fails: no such script
			failed = append(failed, id)
		}
		b, _ := json.Marshal(map[string]any{"requestId": id, "tools": []any{tool("s", path)}})
		_, err := e.srv.JS.PublishAsync("narratoria.plans."+session, b)
		require.NoError(t, err)
		bySession[session] = append(bySession[session], id)
	}
	<-e.srv.JS.PublishAsyncComplete()
	timed := e.publish(t, tool("doze", "doze/run"), tool("after", "step/run", "doze"))
	results, err := e.srv.JS.Stream(ctx, messages.StreamResults)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := results.Info(ctx)
		return err == nil && info.State.Msgs >= 1001
	}, testlog.Budget(60*time.Second), 100*time.Millisecond, "1,001 results stored")

	bctx := browser(t)
	t.Cleanup(func() {
		if t.Failed() {
			text, _ := chromedp.Run(context.WithoutCancel(bctx), chromedp.Evaluate[string](`document.body.innerText`))
			t.Log("page at failure:\n" + text)
		}
	})
	ids := `[...document.querySelectorAll('#history-list li.hist-item')].map(li => li.dataset.planId)`
	// By session: all 100 of hist3, on one page.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(e.web.URL+"/#/plans/"+timed),
		logIn("viewer"), // history is for every role
		chromedp.WaitVisible(chromedp.CSS("#history-form")),
		poll(`!document.getElementById('history-count').textContent.endsWith('…') && Number(document.getElementById('history-count').textContent) >= 1001`),
		chromedp.SetValue(chromedp.CSS("#history-session"), "hist3"),
		chromedp.Click(chromedp.CSS("#history-search")),
		poll(`document.getElementById('history-count').textContent === '100' && document.querySelectorAll('#history-list li.hist-item').length === 100`),
	))
	got, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](ids))
	require.NoError(t, err)
	require.ElementsMatch(t, bySession["hist3"], got, "every plan of session hist3")

	// By state: the 200 failed plans, over two pages.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Evaluate[chromedp.Void](`document.getElementById('history-session').value = ''; document.getElementById('history-state').value = 'failed'`),
		chromedp.Click(chromedp.CSS("#history-search")),
		poll(`document.getElementById('history-count').textContent === '200' && document.querySelectorAll('#history-list li.hist-item').length === 100`),
	))
	page1, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](ids))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS("#history-next")),
		poll(`!document.getElementById('history-prev').disabled && document.getElementById('history-next').disabled`),
	))
	page2, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](ids))
	require.NoError(t, err)
	require.ElementsMatch(t, failed, append(page1, page2...), "every failed plan, once")

	// The plan's URL opened it: its timeline has a lane per tool, and the
	// doze tool ran at least as long as it slept.
	require.NoError(t, chromedp.Do(bctx,
		poll(fmt.Sprintf(`document.getElementById('plan').dataset.planId === %q`, timed)),
		poll(`document.querySelectorAll('#timeline g.lane').length === 2 && document.querySelector('#timeline g.lane[data-tool-id="doze"] rect.span.running') !== null`),
		// A time axis: ticks from 0, labelled in time since the plan began.
		poll(`document.querySelectorAll('#timeline g.axis text.tick').length >= 2 && document.querySelector('#timeline g.axis text.tick').textContent === '0'`),
	))
	ms, err := chromedp.Run(bctx, chromedp.Evaluate[int](`Number(document.querySelector('#timeline g.lane[data-tool-id="doze"] text.duration').dataset.ms)`))
	require.NoError(t, err)
	require.GreaterOrEqual(t, ms, int(dozeFor.Milliseconds()), "the timeline shows the tool's real run time")
	screenshot(t, bctx, "console-timeline.png")
	noCSPViolations(t, bctx)
}

// approvalInputWhileLoading: a plan opened while its gate is still
// pending, whose status answer reaches the page only after the gate began
// waiting for approval (the page's fetch of it is held 1.5 s), shows the
// input the gate would run with — the progress event that came meanwhile
// is newer than the status and carries it. The plan is left waiting.
func approvalInputWhileLoading(t *testing.T, ctx context.Context, e *env) {
	t.Helper()
	gate := uuid.NewString()
	// Every answer to the gate plan's status is held before the page reads it.
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		const f = window.fetch;
		window.fetch = async (...a) => {
			const r = await f(...a);
			if (String(a[0]).endsWith('/api/plans/%s')) await new Promise((res) => setTimeout(res, 1500));
			return r;
		};
		return true;
	})()`, gate)))
	require.NoError(t, err)
	b, _ := json.Marshal(map[string]any{"requestId": gate, "tools": []any{tool("doze", "doze/run"), tool("roll", "roll/run", "doze"),
		map[string]any{"toolId": "gate", "toolPath": "step/run", "requiresApproval": true, "dependencies": []string{"roll"},
			"input": map[string]any{"bonus": "$roll.total"}}}})
	_, err = e.srv.JS.Publish(t.Context(), "narratoria.plans.web", b)
	require.NoError(t, err)
	sel := fmt.Sprintf(`li.plan-item[data-plan-id=%q]`, gate)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		clickJS(sel), // while doze sleeps: the status says the gate is pending
		poll(`document.querySelector('#dag g.node[data-tool-id="gate"]')?.dataset.state === 'awaiting_approval'`),
		clickJS(`#dag g.node[data-tool-id="gate"]`),
		poll(`document.getElementById('tool-input').dataset.awaiting === 'true'`),
	))
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('tool-input').textContent`))
	require.NoError(t, err)
	require.JSONEq(t, `{"bonus":17}`, shown, "the input of a gate whose wait began while its plan loaded")
}
