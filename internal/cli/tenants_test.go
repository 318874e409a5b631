package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// chromiumPath finds Debian's chromium (or another Chrome) on PATH.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// headless starts headless Chromium on a fresh profile for t (as the
// console's browser tests do).
func headless(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("chromium not installed: the browser tests are skipped (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	ctx, tcancel := context.WithTimeout(ctx, testlog.Budget(120*time.Second))
	t.Cleanup(tcancel)
	return ctx
}

// pollJS waits until a JavaScript expression is true.
func pollJS(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(testlog.Budget(30*time.Second)))
}

// TestTenantConsolesInBrowser (issue 47): `up --tenants acme,globex`
// serves each tenant a console that works for that tenant — its name
// shown, no error, its own finished plans in the history (with the
// player's words) and the skills, none of the other tenant's plans — and
// the operator a console across both.
func TestTenantConsolesInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up and a browser")
	}
	dir := testlog.OpenTempDir(t)
	skills := filepath.Join(dir, "skills")
	writeEchoSkill(t, skills)
	url, _ := upInProcessWith(t, dir, skills, "--tenants", "acme,globex", "--console-port", "-1")
	b, err := os.ReadFile(filepath.Join(dir, "ready"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 4, "the NATS URL, the operator's console, then acme's and globex's: %q", b)
	operator, consoles := lines[1], map[string]string{"acme": lines[2], "globex": lines[3]}
	creds := func(tenant string) string { return filepath.Join(dir, "data", "tenants", tenant+".creds") }
	plans := map[string]string{}
	for _, tenant := range []string{"acme", "globex"} {
		require.Eventually(t, func() bool {
			code, out, _ := run(t, "", "skills", "--nats-url", url)
			return code == 0 && strings.Contains(out, "echo")
		}, testlog.Budget(10*time.Second), 100*time.Millisecond)
		code, out, errOut := run(t, "", "prompt", "--json", "--nats-url", url, "--creds", creds(tenant), "--session", "s1", "hello from "+tenant)
		require.Equal(t, 0, code, errOut)
		var n messages.Narration
		require.NoError(t, json.Unmarshal([]byte(out), &n), out)
		plans[tenant] = n.PlanID
	}
	password, err := os.ReadFile(filepath.Join(dir, "data", "console", "admin-password"))
	require.NoError(t, err)
	ctx := headless(t)
	t.Cleanup(func() {
		if t.Failed() {
			text, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body.innerText`))
			t.Log("page at failure:\n" + text)
		}
	})
	histIDs := `[...document.querySelectorAll('#history-list li.hist-item')].map(li => li.dataset.planId)`
	for tenant, other := range map[string]string{"acme": "globex", "globex": "acme"} {
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Navigate(consoles[tenant]),
			chromedp.WaitVisible(chromedp.CSS("#login-name")),
			chromedp.SetValue(chromedp.CSS("#login-name"), "admin"),
			chromedp.SetValue(chromedp.CSS("#login-password"), strings.TrimSpace(string(password))),
			chromedp.Click(chromedp.CSS("#login-submit")),
			pollJS(fmt.Sprintf(`document.getElementById('tenant').textContent === 'tenant %s'`, tenant)),
			pollJS(fmt.Sprintf(`[...document.querySelectorAll('#history-list li.hist-item')].some(li => li.dataset.planId === %q)`, plans[tenant])),
			pollJS(`document.querySelector('#skills li[data-skill="echo"]') !== null`),
			pollJS(fmt.Sprintf(`[...document.querySelectorAll('#history-list li.hist-item .prompt')].some(p => p.textContent === '“hello from %s”')`, tenant)),
		))
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](histIDs))
		require.NoError(t, err)
		require.NotContains(t, ids, plans[other], "%s's console lists none of %s's plans", tenant, other)
		errText, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#error")))
		require.NoError(t, err)
		require.Empty(t, strings.TrimSpace(errText), "%s's console shows no error", tenant)
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#login-name"))))
	}
	// The operator's console sees both tenants' plans, their sessions named
	// with their tenants.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(operator),
		chromedp.WaitVisible(chromedp.CSS("#login-name")),
		chromedp.SetValue(chromedp.CSS("#login-name"), "admin"),
		chromedp.SetValue(chromedp.CSS("#login-password"), strings.TrimSpace(string(password))),
		chromedp.Click(chromedp.CSS("#login-submit")),
		pollJS(`document.getElementById('tenant').textContent === 'all tenants'`),
		pollJS(fmt.Sprintf(`(() => { const ids = %s; return ids.includes(%q) && ids.includes(%q); })()`, histIDs, plans["acme"], plans["globex"])),
		pollJS(`[...document.querySelectorAll('#history-list a.session-link')].some(a => a.textContent === 'acme.s1')`),
	))
}

// TestTenantLifecycle (issue 47): each tenant command does one clear
// thing — rm revokes (a watch with the tenant's credentials says they
// were refused and ends, exit 1), rm again and rm of an unknown tenant
// say so, rotate of a removed tenant is refused, add brings it back with
// new credentials (--creds-out) while the old ones stay refused, rotate
// --creds-out writes the new ones where asked — and watch says when the
// server goes away.
func TestTenantLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up")
	}
	dir := testlog.OpenTempDir(t)
	skills := filepath.Join(dir, "skills")
	writeEchoSkill(t, skills)
	url, stop := upInProcessWith(t, dir, skills, "--tenants", "acme,globex")
	data := filepath.Join(dir, "data")
	acmeCreds := filepath.Join(data, "tenants", "acme.creds")
	first := filepath.Join(dir, "acme-first.creds")
	require.NoError(t, copyFile(acmeCreds, first))
	tenant := func(args ...string) (int, string, string) {
		return run(t, "", append(append([]string{"tenant"}, args...), "--nats-url", url, "--auth-dir", data)...)
	}
	works := func(creds string) bool {
		code, _, _ := run(t, "", "plan", "ls", "--nats-url", url, "--creds", creds)
		return code == 0
	}
	require.True(t, works(first))

	// A watch with acme's credentials, then acme removed.
	watched := make(chan string, 1)
	go func() {
		code, _, errOut := run(t, "", "watch", "--nats-url", url, "--creds", first, "--session", "s1")
		watched <- fmt.Sprint(code, " ", errOut)
	}()
	time.Sleep(500 * time.Millisecond) // let it subscribe
	code, out, errOut := tenant("rm", "acme")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "tenant acme removed")
	select {
	case w := <-watched:
		require.True(t, strings.HasPrefix(w, "1 "), w)
		require.Contains(t, w, "refused these credentials")
	case <-time.After(testlog.Budget(20 * time.Second)):
		t.Fatal("watch did not say its credentials were revoked")
	}
	require.False(t, works(first))

	code, out, _ = tenant("rm", "acme")
	require.Equal(t, 0, code)
	require.Contains(t, out, "tenant acme was removed already; nothing changed")
	code, _, errOut = tenant("rm", "nosuch")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `unknown tenant "nosuch"`)
	code, _, errOut = tenant("rotate", "acme")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "tenant acme was removed: nothing to rotate; `narratoria tenant add acme` brings it back")
	code, _, errOut = tenant("rotate", "nosuch")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown tenant")

	readded := filepath.Join(dir, "acme-readded.creds")
	code, out, errOut = tenant("add", "acme", "--creds-out", readded)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "tenant acme re-added with new credentials")
	require.True(t, works(readded), "the new credentials work")
	require.False(t, works(first), "the removed ones stay refused")
	code, out, _ = tenant("add", "globex")
	require.Equal(t, 0, code)
	require.Contains(t, out, "tenant globex updated (its credentials are unchanged)")

	rotated := filepath.Join(dir, "acme-rotated.creds")
	code, out, errOut = tenant("rotate", "acme", "--creds-out", rotated)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "new credentials in "+rotated)
	require.True(t, works(rotated))
	require.False(t, works(readded), "rotated out")
	st, err := os.Stat(rotated)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// The server goes away: a watch says it lost the connection.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lost := &testlog.Buffer{}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		root := NewRoot(Streams{In: strings.NewReader(""), Out: &testlog.Buffer{}, Err: lost})
		root.SetArgs([]string{"watch", "--nats-url", url, "--creds", upCreds(dir)})
		_ = root.ExecuteContext(ctx)
	}()
	require.Eventually(t, func() bool { return strings.Contains(lost.String(), "watching session") }, testlog.Budget(10*time.Second), 20*time.Millisecond)
	stop()
	require.Eventually(t, func() bool { return strings.Contains(lost.String(), "lost the connection to NATS") },
		testlog.Budget(20*time.Second), 50*time.Millisecond, "watch says it lost the server: %s", lost)
	cancel()
	<-ended
}

// TestCredsAreIgnoredByGit: a credentials file written where the README
// says (tenant add --creds-out initech.creds, in the repository) or a
// seed is never committed by accident.
func TestCredsAreIgnoredByGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	for _, f := range []string{"initech.creds", "deploy/game.creds", "tenants/acme.nk"} {
		cmd := exec.Command("git", "check-ignore", "-q", "--no-index", f)
		cmd.Dir = "../.."
		require.NoError(t, cmd.Run(), "%s is ignored by .gitignore", f)
	}
}
