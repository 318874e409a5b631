package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// natsCLIVersion is the nats CLI the tests run: v0.5.0 (not v0.5.1).
const natsCLIVersion = "v0.5.0"

// natsCLI returns the nats CLI, built from the module proxy once per
// machine into the user's cache folder (<cache>/narratoria/natscli-<v>/nats)
// and taken from there afterwards. A cold build (download and compile)
// takes minutes on two cores, so without the binary cached the test runs
// only under make test-long (NARRATORIA_LONG), which builds it.
func natsCLI(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache folder for the nats CLI: %v", err)
	}
	dir := filepath.Join(cache, "narratoria", "natscli-"+natsCLIVersion)
	bin := filepath.Join(dir, "nats")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if os.Getenv("NARRATORIA_LONG") == "" {
		t.Skipf("the nats CLI %s is not built yet (%s): make test-long builds it from the module proxy", natsCLIVersion, bin)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(bin); err == nil {
		return bin // another test process built it meanwhile
	}
	tmp := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/nats-io/natscli/nats@"+natsCLIVersion)
	cmd.Dir = tmp // outside this module: the CLI's own go.mod decides its dependencies
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-mod=mod")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build the nats CLI: %s", out)
	t.Logf("built the nats CLI %s in %s", natsCLIVersion, time.Since(start).Round(time.Second))
	require.NoError(t, os.Rename(filepath.Join(tmp, "nats"), bin))
	return bin
}

// natsCmd runs the nats CLI against a server and fails the test unless it
// exits 0; it returns its standard output.
func natsCmd(t *testing.T, bin, url, creds string, args ...string) string {
	t.Helper()
	full := append([]string{"--server", url, "--no-context"}, args...)
	if creds != "" {
		full = append([]string{"--creds", creds}, full...)
	}
	cmd := exec.Command(bin, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no context of the user's
	require.NoError(t, cmd.Run(), "nats %s: %s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

// listEverything runs what an operator runs first — nats stream ls, kv ls,
// object ls, stream info of every stream, kv info of every bucket — and
// checks each exits 0 and lists every stream and bucket of the product.
func listEverything(t *testing.T, bin, url, creds string) {
	t.Helper()
	natsCmd(t, bin, url, creds, "stream", "ls")
	names := strings.Fields(natsCmd(t, bin, url, creds, "stream", "ls", "--names"))
	var want []string
	for _, sc := range (bus.Config{}).StreamConfigs() {
		want = append(want, sc.Name)
	}
	for _, kc := range (bus.Config{}).BucketConfigs() {
		want = append(want, "KV_"+kc.Bucket)
	}
	want = append(want, "OBJ_"+messages.BucketAssets)
	for _, w := range want {
		require.Contains(t, names, w, "stream ls lists %s", w)
	}
	for _, name := range names {
		natsCmd(t, bin, url, creds, "stream", "info", name)
	}
	kvs := natsCmd(t, bin, url, creds, "kv", "ls")
	for _, kc := range (bus.Config{}).BucketConfigs() {
		require.Contains(t, kvs, kc.Bucket)
		natsCmd(t, bin, url, creds, "kv", "info", kc.Bucket)
	}
	require.Contains(t, natsCmd(t, bin, url, creds, "object", "ls"), messages.BucketAssets)
}

// TestNatsCLIListsUp (issue 47): against `narratoria up`, the nats CLI's
// stream ls, kv ls, object ls and stream info of every stream exit 0; the
// plan control and approval requests are endpoints `nats micro info`
// shows.
func TestNatsCLIListsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up")
	}
	bin := natsCLI(t)
	dir := testlog.OpenTempDir(t)
	skills := filepath.Join(dir, "skills")
	writeEchoSkill(t, skills)
	url := upInProcess(t, dir, skills)
	listEverything(t, bin, url, upCreds(dir))
	info := natsCmd(t, bin, url, upCreds(dir), "micro", "info", "narratoria-scheduler")
	for _, e := range []string{"plan-status", "plan-cancel", "plan-list", "plan-history", "approval-check", "skills", "session-reset"} {
		require.Contains(t, info, e, "nats micro info shows the %s endpoint", e)
	}
}

// TestNatsCLIListsProvisioned (issue 47): a server provisioned by
// `narratoria provision` — over a plans bucket an earlier version made
// with a per-key limit of math.MaxInt64, which the nats CLI v0.4.0 could
// not read — is listed by the nats CLI in full, every stream's info
// included; the plans bucket's limit is one every client reads exactly.
func TestNatsCLIListsProvisioned(t *testing.T) {
	bin := natsCLI(t)
	srv, err := embedded.Start(embedded.Options{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// What an earlier version provisioned.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: messages.BucketPlans, History: 1})
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	old := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	old.MaxMsgsPerSubject, old.AllowMsgTTL = math.MaxInt64, true
	_, err = js.UpdateStream(ctx, old)
	require.NoError(t, err)

	code, out, errOut := run(t, "", "provision", "--nats-url", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "KV "+messages.BucketPlans+"          updated")
	listEverything(t, bin, url, "")
	raw := natsCmd(t, bin, url, "", "stream", "info", "KV_"+messages.BucketPlans, "--json")
	var si struct {
		Config struct {
			MaxMsgsPerSubject json.Number `json:"max_msgs_per_subject"`
		} `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &si), raw)
	require.Equal(t, fmt.Sprint(bus.BucketPerKeyEvery), si.Config.MaxMsgsPerSubject.String(), "an existing bucket is brought to the new limit")
}
