package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/narratoria/runtime/internal/testlog"
)

// deployPasswords are the variables the shipped NATS configs read: one
// password per user of accounts.conf, and the cluster's route password
// (deploy/gen-secrets.sh writes each).
var deployPasswords = []string{"GAME_PASSWORD", "NARRATOR_PASSWORD", "SCHEDULER_PASSWORD", "CONSOLE_PASSWORD",
	"WORKER_STORY_PASSWORD", "WORKER_ART_PASSWORD", "OPERATOR_PASSWORD", "SYS_PASSWORD", "ROUTE_PASSWORD"}

// setDeployEnv sets every variable the shipped configs read, the route
// URLs as docker-compose.yml builds them.
func setDeployEnv(t *testing.T) {
	for _, v := range deployPasswords {
		t.Setenv(v, "secret-"+strings.ToLower(v))
	}
	for n := 1; n <= 3; n++ {
		t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", n), fmt.Sprintf("nats-route://route:secret-route_password@nats-%d:6222", n))
	}
}

// TestDeployNATSConfigs parses the cluster configs with nats-server's own
// parser: JetStream, routes to the three nodes with the route user's
// password, routes accepted only with it, monitoring on loopback only,
// the payload limit, the system account, a user per role. What the users
// may do is proven against a running server by TestPermissions and
// TestPermissionsConsole.
func TestDeployNATSConfigs(t *testing.T) {
	setDeployEnv(t)
	for _, f := range []string{"nats-1.conf", "nats-2.conf", "nats-3.conf"} {
		opts, err := server.ProcessConfigFile("../../deploy/nats/" + f)
		require.NoError(t, err, f)
		require.True(t, opts.JetStream, f)
		require.EqualValues(t, 8<<20, opts.MaxPayload, f)
		require.Len(t, opts.Routes, 3, f)
		for _, r := range opts.Routes {
			pw, _ := r.User.Password()
			require.Equal(t, "route", r.User.Username(), "%s: route %s names the route user", f, r.Host)
			require.Equal(t, "secret-route_password", pw, "%s: route %s carries the route password", f, r.Host)
		}
		require.Equal(t, "route", opts.Cluster.Username, "%s: a route must authenticate", f)
		require.Equal(t, "secret-route_password", opts.Cluster.Password, f)
		require.Equal(t, "127.0.0.1", opts.HTTPHost, "%s: the unauthenticated monitoring port listens on loopback only", f)
		require.Equal(t, "SYS", opts.SystemAccount, f)
		var users []string
		for _, u := range opts.Users {
			users = append(users, u.Username)
		}
		require.ElementsMatch(t, []string{"game", "narrator", "scheduler", "console", "worker_story", "worker_art", "operator", "sys"}, users, f)
	}
	// An unset password stops the server at its start: nothing falls back
	// to a default.
	for _, v := range deployPasswords {
		t.Run(v, func(t *testing.T) {
			require.NoError(t, os.Unsetenv(v))
			defer os.Setenv(v, "secret-"+strings.ToLower(v))
			_, err := server.ProcessConfigFile("../../deploy/nats/nats-1.conf")
			require.ErrorContains(t, err, v)
		})
	}
}

// TestDeployK8sNATSConfig parses the cluster config of the Kubernetes
// manifests (deploy/k8s/nats.yaml's ConfigMap, with the shipped
// accounts.conf beside it as the StatefulSet mounts them) with
// nats-server's parser: JetStream, routes to the three pods with the
// route user's password, routes accepted only with it, a user per role.
// Monitoring listens on the pod's address there (the kubelet's probes and
// KEDA read it; a NetworkPolicy fences it: deploy/check).
func TestDeployK8sNATSConfig(t *testing.T) {
	setDeployEnv(t)
	t.Setenv("POD_NAME", "nats-0")
	b, err := os.ReadFile("../../deploy/k8s/nats.yaml")
	require.NoError(t, err)
	var cm struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	require.NoError(t, yaml.NewDecoder(strings.NewReader(string(b))).Decode(&cm))
	require.Equal(t, "ConfigMap", cm.Kind, "nats.yaml starts with the server's ConfigMap")
	dir := testlog.OpenTempDir(t)
	accounts, err := os.ReadFile("../../deploy/nats/accounts.conf")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(cm.Data["nats.conf"]), 0o600))
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	require.NoError(t, err)
	require.Equal(t, "nats-0", opts.ServerName)
	require.True(t, opts.JetStream)
	require.EqualValues(t, 8<<20, opts.MaxPayload)
	require.Len(t, opts.Routes, 3)
	require.Equal(t, "route", opts.Cluster.Username, "a route must authenticate")
	require.Equal(t, "secret-route_password", opts.Cluster.Password)
	require.Equal(t, "SYS", opts.SystemAccount)
	require.Len(t, opts.Users, 8)
	require.NoError(t, os.Unsetenv("ROUTE_PASSWORD"))
	_, err = server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	require.ErrorContains(t, err, "ROUTE_PASSWORD", "no route password, no server")
}

// lineLog keeps a server's log lines and signals each new one.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	added chan struct{}
}

func (l *lineLog) add(format string, v ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

func (l *lineLog) has(part string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

func (l *lineLog) Noticef(format string, v ...any) { l.add(format, v...) }
func (l *lineLog) Warnf(format string, v ...any)   { l.add(format, v...) }
func (l *lineLog) Fatalf(format string, v ...any)  { l.add(format, v...) }
func (l *lineLog) Errorf(format string, v ...any)  { l.add(format, v...) }
func (l *lineLog) Debugf(format string, v ...any)  { l.add(format, v...) }
func (l *lineLog) Tracef(format string, v ...any)  { l.add(format, v...) }

// TestDeployRoutesNeedThePassword starts a node from the shipped
// nats-1.conf (its ports moved to free ones on loopback) and offers it
// two routes: a server that does not know the route password is refused
// (it would otherwise receive every account's messages), one that knows
// it joins the cluster.
func TestDeployRoutesNeedThePassword(t *testing.T) {
	setDeployEnv(t)
	opts, err := server.ProcessConfigFile("../../deploy/nats/nats-1.conf")
	require.NoError(t, err)
	dir := testlog.OpenTempDir(t)
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", -1
	opts.Routes = nil // the other nodes are the ones below
	// (JetStream in a cluster needs its routes configured at start: this
	// test is about who may open one, so the node runs without it.)
	opts.JetStream, opts.StoreDir = false, filepath.Join(dir, "node-1")
	opts.NoSigs = true
	node, err := server.NewServer(opts)
	require.NoError(t, err)
	log := &lineLog{added: make(chan struct{}, 1)}
	node.SetLoggerV2(log, false, false, false)
	go node.Start()
	require.True(t, node.ReadyForConnections(10*time.Second), "%v", log.lines)
	t.Cleanup(func() { node.Shutdown(); node.WaitForShutdown() })
	routeURL := func(user string) string {
		addr := node.ClusterAddr()
		return fmt.Sprintf("nats-route://%s127.0.0.1:%d", user, addr.Port)
	}
	peer := func(name, url string) *server.Server {
		po := &server.Options{ServerName: name, Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: opts.Cluster.Name, Host: "127.0.0.1", Port: -1}}
		po.Routes = server.RoutesFromStr(url)
		s, err := server.NewServer(po)
		require.NoError(t, err)
		go s.Start()
		require.True(t, s.ReadyForConnections(10*time.Second))
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		return s
	}

	peer("rogue", routeURL(""))
	deadline := time.After(testlog.Budget(10 * time.Second))
	for !log.has("Authorization Violation") && !log.has("authentication error") {
		select {
		case <-log.added:
		case <-deadline:
			t.Fatalf("the node did not refuse a route without the password; its log: %v", log.lines)
		}
	}
	require.Zero(t, node.NumRoutes(), "no route without the password")

	peer("nats-2", routeURL("route:secret-route_password@"))
	require.Eventually(t, func() bool { return node.NumRoutes() > 0 }, testlog.Budget(10*time.Second), 20*time.Millisecond,
		"a node with the route password joins")
}
