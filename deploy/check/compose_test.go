package check

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// testEnv sets every password the compose file requires.
func testEnv(t *testing.T) map[string]string {
	t.Helper()
	names, err := secretNames()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, n := range names {
		env[n] = "0123456789abcdef0123456789abcdef-" + strings.ToLower(n)
	}
	return env
}

func shipped(t *testing.T) (content []byte, pools map[string][]string, natsVars []string) {
	t.Helper()
	content, err := readDeploy(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	if pools, err = workerPools(); err != nil {
		t.Fatal(err)
	}
	if natsVars, err = natsConfVars(); err != nil {
		t.Fatal(err)
	}
	return content, pools, natsVars
}

// TestComposeFile loads deploy/docker-compose.yml as `docker compose
// config` does, with every password set, and checks the safe defaults:
// no service runs as root or with a writable root, a capability or a way
// to gain privileges; each has CPU and memory limits; only NATS's client
// port is published beyond the host's loopback (never the monitoring
// port, never the console's plain HTTP); NATS has its health check, its
// store in a named volume and every variable its configuration reads;
// each worker pool of accounts.conf has a service under its own user and
// inbox serving exactly its skills from the skills volume; the console
// runs as its own user; no password has a default or crosses a command
// line.
func TestComposeFile(t *testing.T) {
	content, pools, natsVars := shipped(t)
	p, err := loadCompose(context.Background(), content, testEnv(t))
	if err != nil {
		t.Fatalf("docker compose config would fail: %v", err)
	}
	for _, prob := range append(checkCompose(p, pools, natsVars), checkComposeText(string(content))...) {
		t.Error(prob)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d services: %v; NATS reads %v; pools %v", len(p.Services), p.ServiceNames(), natsVars, pools)
}

// TestComposeRefusesMissingPasswords: without any one password, or with
// it empty, the file does not load (compose refuses to start), naming
// the variable and how to make it. No password falls back to a default.
func TestComposeRefusesMissingPasswords(t *testing.T) {
	content, _, _ := shipped(t)
	full := testEnv(t)
	for name := range full {
		for _, value := range []*string{nil, new(string)} {
			env := map[string]string{}
			for k, v := range full {
				env[k] = v
			}
			how := "unset"
			if value == nil {
				delete(env, name)
			} else {
				env[name], how = *value, "empty"
			}
			_, err := loadCompose(context.Background(), content, env)
			if err == nil {
				t.Errorf("%s %s: the compose file still loads", name, how)
				continue
			}
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "gen-secrets.sh") {
				t.Errorf("%s %s: the error does not name it and the way to make it: %v", name, how, err)
			}
		}
	}
}

// TestGenSecretsFeedsCompose runs deploy/gen-secrets.sh in a copy of
// deploy/ and loads the compose file with the .env it wrote, as compose
// does from the project folder: the file is private (0600), has every
// password the deployment reads, each random and distinct, loads, and a
// second run refuses to overwrite it.
func TestGenSecretsFeedsCompose(t *testing.T) {
	dir := t.TempDir()
	script, err := readDeploy("gen-secrets.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gen-secrets.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", filepath.Join(dir, "gen-secrets.sh")).CombinedOutput(); err != nil {
		t.Fatalf("gen-secrets.sh: %v: %s", err, out)
	}
	envFile := filepath.Join(dir, ".env")
	st, err := os.Stat(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf(".env has mode %o, want 0600", st.Mode().Perm())
	}
	if out, err := exec.Command("sh", filepath.Join(dir, "gen-secrets.sh")).CombinedOutput(); err == nil {
		t.Errorf("a second run overwrote .env: %s", out)
	}
	compose, err := filepath.Abs(filepath.Join(deployDir, composeFile))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{compose}, cli.WithEnvFiles(envFile), cli.WithDotEnv)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose with the generated .env: %v", err)
	}
	seen := map[string]string{}
	names, _ := secretNames()
	natsVars, _ := natsConfVars()
	for _, n := range names {
		v := p.Environment[n]
		if len(v) < 32 {
			t.Errorf("%s: %q is not a long random value", n, v)
		}
		if other, dup := seen[v]; dup {
			t.Errorf("%s and %s have the same value", n, other)
		}
		seen[v] = n
	}
	// Every variable a NATS config reads is a password of the file or a
	// route URL made from one.
	for _, v := range natsVars {
		if _, ok := seen[p.Environment[v]]; !ok && !strings.HasPrefix(v, "NATS_ROUTE_") {
			t.Errorf("the NATS configs read %s, which gen-secrets.sh does not write", v)
		}
	}
}

// TestComposeChecksCatchBreakage breaks the shipped file once for each
// check and watches the checks (or the loader) refuse it: each edit is
// one an operator might make.
func TestComposeChecksCatchBreakage(t *testing.T) {
	content, pools, natsVars := shipped(t)
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"a password fallback", "${GAME_PASSWORD:?run deploy/gen-secrets.sh first (it writes deploy/.env)}", "${GAME_PASSWORD:-game}", "GAME_PASSWORD"},
		{"the monitoring port published", `ports: ["4222:4222"]`, `ports: ["4222:4222", "8222:8222"]`, "monitoring port"},
		{"the console on every interface", `ports: ["127.0.0.1:7420:7420"]`, `ports: ["7420:7420"]`, "console's plain HTTP"},
		{"a metrics port published", `hostname: nats-2`, "hostname: nats-2\n    ports: [\"9091:9091\"]", "publishes port 9091"},
		{"a container as root", `user: "10001:10001"` + "\n  depends_on", `user: "0:0"` + "\n  depends_on", "runs as root"},
		{"no user at all", `user: "10002:10002"`, `hostname: nats`, "runs as root"},
		{"a writable root", "  read_only: true\n", "  read_only: false\n", "writable root"},
		{"capabilities kept", "  cap_drop: [ALL]\n", "  cap_drop: [NET_RAW]\n", "keeps its capabilities"},
		{"a capability added", "  cap_drop: [ALL]\n", "  cap_drop: [ALL]\n  cap_add: [SYS_ADMIN]\n", "adds capabilities"},
		{"privileges gained", `security_opt: ["no-new-privileges:true"]`, `security_opt: ["label:disable"]`, "may gain privileges"},
		{"no memory limit", `limits: { cpus: "1", memory: 512M }`, `limits: { cpus: "1" }`, "scheduler: has no CPU and memory limits"},
		{"no limits on the console", "limits: { cpus: \"0.5\", memory: 256M }\n        reservations: { cpus: \"0.1\", memory: 64M }", "reservations: { cpus: \"0.1\", memory: 64M }", "console: has no CPU and memory limits"},
		{"no NATS health check", `test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8222/healthz"]`, `test: ["CMD", "true"]`, "no health check"},
		{"the store in the container", `"nats-3-data:/data"`, `"./data:/data"`, "named volume"},
		{"the old shared worker user", "NARRATORIA_NATS_USER: worker_art", "NARRATORIA_NATS_USER: skillworker", "not as a worker pool"},
		{"a pool's inbox", "NARRATORIA_NATS_INBOXPREFIX: _INBOX_worker_story", "NARRATORIA_NATS_INBOXPREFIX: _INBOX_worker", "inbox prefix"},
		{"a skill beyond the pool", `"--skills", "scene-art"`, `"--skills", "scene-art,storyteller"`, "is scoped to"},
		{"skills baked in", `volumes: ["skills:/skills"]` + "\n    tmpfs: [\"/tmp:size=512m,mode=1777\"]\n    deploy:\n      replicas: 2", `tmpfs: ["/tmp:size=512m,mode=1777"]` + "\n    deploy:\n      replicas: 2", "no skills volume"},
		{"no tmpfs for the attempts", `tmpfs: ["/tmp:size=512m,mode=1777"]` + "\n    deploy:\n      resources", "deploy:\n      resources", "no tmpfs"},
		{"the console as operator", "NARRATORIA_NATS_USER: console", "NARRATORIA_NATS_USER: operator", "own user"},
		{"a password on a command line", `command: ["narratoria", "provision", "--replicas", "3"]`, `command: ["narratoria", "provision", "--replicas", "3", "--password", "x"]`, "command line"},
		{"a route password not passed", "    ROUTE_PASSWORD: ${ROUTE_PASSWORD", "    UNUSED: ${ROUTE_PASSWORD", "ROUTE_PASSWORD"},
		{"a pool without workers", "  worker-art:\n", "  worker-art:\n    profiles: [art]\n", "pool art"},
		{"not a compose file", "services:\n", "servicez:\n", "servicez"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(content), tc.from) {
				t.Fatalf("the shipped file has no %q to break", tc.from)
			}
			broken := strings.Replace(string(content), tc.from, tc.to, 1)
			var probs []string
			p, err := loadCompose(context.Background(), []byte(broken), testEnv(t))
			if err != nil {
				probs = []string{err.Error()}
			} else {
				// A service in a profile is not started by default: it
				// does not count.
				p, err = p.WithProfiles(nil)
				if err != nil {
					t.Fatal(err)
				}
				probs = append(checkCompose(p, pools, natsVars), checkComposeText(broken)...)
			}
			for _, prob := range probs {
				if strings.Contains(prob, tc.want) {
					t.Logf("caught: %s", prob)
					return
				}
			}
			t.Errorf("not caught (want a problem with %q): %v", tc.want, probs)
		})
	}
}

// TestComposeAllowsConsoleWithTLS: the console may be published beyond
// the host's loopback once it serves TLS itself (its certificate named
// in its command or environment; consoleTLS).
func TestComposeAllowsConsoleWithTLS(t *testing.T) {
	content, pools, natsVars := shipped(t)
	from := `command: ["narratoria", "console", "--listen", "0.0.0.0:7420"]`
	broken := strings.Replace(string(content), from, `command: ["narratoria", "console", "--listen", "0.0.0.0:7420", "--https-cert", "/run/secrets/console.pem", "--https-key", "/run/secrets/console.key"]`, 1)
	broken = strings.Replace(broken, `ports: ["127.0.0.1:7420:7420"]`, `ports: ["7420:7420"]`, 1)
	if broken == string(content) || !strings.Contains(string(content), from) {
		t.Fatal("the shipped console service changed: update this test")
	}
	p, err := loadCompose(context.Background(), []byte(broken), testEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, prob := range checkCompose(p, pools, natsVars) {
		t.Error(prob)
	}
}
