package check

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// composeFile is the shipped compose file, in deploy/.
const composeFile = "docker-compose.yml"

// loadCompose loads a compose file's content as `docker compose config`
// does: YAML with its anchors and merges, interpolation from env (a
// required variable missing is an error), the compose-spec schema,
// normalization and the consistency of services, volumes and networks,
// relative paths resolved from deploy/.
func loadCompose(ctx context.Context, content []byte, env map[string]string) (*types.Project, error) {
	dir, err := filepath.Abs(deployDir)
	if err != nil {
		return nil, err
	}
	return loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, composeFile), Content: content}},
		Environment: env,
	})
}

// Ports.
const (
	natsClientPort  = 4222
	natsMonitorPort = 8222
	consolePort     = 7420
)

// loopback says whether a published port's host address is the host's
// loopback only ("" and 0.0.0.0 are every interface).
func loopback(hostIP string) bool {
	a, err := netip.ParseAddr(strings.Trim(hostIP, "[]"))
	return err == nil && a.IsLoopback()
}

// rootUser says whether a compose user: value runs as root: empty (the
// image's, which the check does not trust), 0 or root, with any group.
func rootUser(user string) bool {
	name, _, _ := strings.Cut(user, ":")
	return name == "" || name == "0" || name == "root"
}

// componentOf says what a service runs, from its command: nats, a
// skillworker, the console, provision, scheduler or narrator.
func componentOf(s types.ServiceConfig) string {
	cmd := []string(s.Command)
	switch {
	case strings.Contains(s.Image, "nats"):
		return "nats"
	case len(cmd) == 0:
		return ""
	case cmd[0] == "skillworker":
		return "skillworker"
	case cmd[0] == "narratoria" && len(cmd) > 1:
		return cmd[1] // console, provision
	}
	return cmd[0]
}

// flagValue is the value of a --name flag in a command ("" without it).
func flagValue(cmd []string, name string) string {
	for i, a := range cmd {
		if a == name && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// env is a service's environment variable ("" when unset).
func env(s types.ServiceConfig, key string) string {
	if v, ok := s.Environment[key]; ok && v != nil {
		return *v
	}
	return ""
}

// consoleTLS says whether a console service is configured to serve TLS
// itself. The console has no TLS option yet (it is being added on
// another branch, as console configuration keys): this looks for a TLS
// certificate named in its command or environment, the hook to adjust
// when that option lands.
func consoleTLS(s types.ServiceConfig) bool {
	for _, a := range s.Command {
		if strings.Contains(strings.ToLower(a), "https-cert") {
			return true
		}
	}
	for k, v := range s.Environment {
		if strings.Contains(k, "CONSOLE_TLSCERT") && v != nil && *v != "" {
			return true
		}
	}
	return false
}

// checkCompose returns what the loaded compose project breaks of the
// shipped deployment's safe defaults, one sentence each, naming the
// service. pools are the worker pools of accounts.conf; natsVars the
// variables the NATS configs read.
func checkCompose(p *types.Project, pools map[string][]string, natsVars []string) []string {
	var probs []string
	bad := func(svc, format string, args ...any) {
		probs = append(probs, svc+": "+fmt.Sprintf(format, args...))
	}
	poolsServed := map[string]bool{}
	components := map[string]int{}
	names := make([]string, 0, len(p.Services))
	for name := range p.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := p.Services[name]
		comp := componentOf(s)
		components[comp]++
		// Every container: an unprivileged user, a read-only root, no
		// capability, no privilege escalation, nothing of the host's.
		if rootUser(s.User) {
			bad(name, "runs as root (user %q): set user: to an unprivileged UID", s.User)
		}
		if !s.ReadOnly {
			bad(name, "has a writable root filesystem: read_only: true (and a tmpfs where it writes)")
		}
		if !slices.ContainsFunc(s.CapDrop, func(c string) bool { return strings.EqualFold(c, "ALL") }) {
			bad(name, "keeps its capabilities: cap_drop: [ALL]")
		}
		if len(s.CapAdd) > 0 {
			bad(name, "adds capabilities %v", s.CapAdd)
		}
		if !slices.ContainsFunc(s.SecurityOpt, func(o string) bool { return o == "no-new-privileges:true" || o == "no-new-privileges" }) {
			bad(name, "may gain privileges: security_opt: [\"no-new-privileges:true\"]")
		}
		if s.Privileged {
			bad(name, "is privileged")
		}
		for what, v := range map[string]string{"network_mode": s.NetworkMode, "pid": s.Pid, "ipc": s.Ipc} {
			if v == "host" {
				bad(name, "shares the host's %s", what)
			}
		}
		// CPU and memory limits.
		var lim *types.Resource
		if s.Deploy != nil {
			lim = s.Deploy.Resources.Limits
		}
		if lim == nil || lim.NanoCPUs <= 0 || lim.MemoryBytes <= 0 {
			bad(name, "has no CPU and memory limits: deploy.resources.limits.cpus and .memory")
		}
		// Published ports: NATS's client port; anything else on the
		// host's loopback only; never the monitoring port elsewhere; the
		// console elsewhere only with TLS.
		for _, port := range s.Ports {
			if port.Published == "" {
				continue
			}
			switch {
			case port.Target == natsMonitorPort && !loopback(port.HostIP):
				bad(name, "publishes the unauthenticated NATS monitoring port %d on %q: not at all, or on 127.0.0.1", port.Target, port.HostIP)
			case port.Target == consolePort && !loopback(port.HostIP) && !consoleTLS(s):
				bad(name, "publishes the console's plain HTTP on %q: on 127.0.0.1 behind a TLS proxy, or configure its TLS certificate", port.HostIP)
			case port.Target != natsClientPort && port.Target != consolePort && !loopback(port.HostIP):
				bad(name, "publishes port %d on %q: a game server needs NATS's %d only", port.Target, port.HostIP, natsClientPort)
			case port.Target == natsClientPort && comp != "nats":
				bad(name, "publishes port %d but is no NATS server", port.Target)
			}
		}
		switch comp {
		case "nats":
			if s.HealthCheck == nil || s.HealthCheck.Disable || !strings.Contains(strings.Join(s.HealthCheck.Test, " "), "127.0.0.1:"+strconv.Itoa(natsMonitorPort)+"/healthz") {
				bad(name, "has no health check on its monitoring endpoint (127.0.0.1:%d/healthz, from inside the container)", natsMonitorPort)
			}
			if !mountsVolume(s, "/data") {
				bad(name, "keeps its store outside a named volume: mount one at /data")
			}
			for _, v := range natsVars {
				if env(s, v) == "" {
					bad(name, "does not get %s, which its configuration reads", v)
				}
			}
		case "skillworker":
			user := env(s, "NARRATORIA_NATS_USER")
			pool, ok := strings.CutPrefix(user, "worker_")
			skills, known := pools[pool]
			if !ok || !known {
				bad(name, "connects as %q, not as a worker pool of accounts.conf (worker_<pool>)", user)
				break
			}
			poolsServed[pool] = true
			if got := env(s, "NARRATORIA_NATS_INBOXPREFIX"); got != "_INBOX_worker_"+pool {
				bad(name, "uses the inbox prefix %q: its user may read only _INBOX_worker_%s", got, pool)
			}
			served := strings.Split(flagValue(s.Command, "--skills"), ",")
			sort.Strings(served)
			if !slices.Equal(served, skills) {
				bad(name, "serves --skills %v, but its user worker_%s is scoped to %v", served, pool, skills)
			}
			if !mountsVolume(s, "/skills") {
				bad(name, "has no skills volume at /skills (a new skill would need a rebuild)")
			}
			if !slices.ContainsFunc(s.Tmpfs, func(t string) bool { return strings.HasPrefix(t, "/tmp") }) {
				bad(name, "has no tmpfs at /tmp for its attempts' temporary folders")
			}
		case "console":
			if env(s, "NARRATORIA_NATS_USER") != "console" || env(s, "NARRATORIA_NATS_INBOXPREFIX") != "_INBOX_console" {
				bad(name, "connects as %q (inbox %q): the console has its own user, console, inbox _INBOX_console",
					env(s, "NARRATORIA_NATS_USER"), env(s, "NARRATORIA_NATS_INBOXPREFIX"))
			}
		case "scheduler", "narrator":
			if u := env(s, "NARRATORIA_NATS_USER"); u != comp {
				bad(name, "connects as %q, not as its role %s", u, comp)
			}
		}
		if u := env(s, "NARRATORIA_NATS_USER"); u == "operator" && comp != "provision" {
			bad(name, "connects as the operator (every permission)")
		}
		// A password belongs in the environment, never on a command line
		// every process of the host may read.
		if slices.Contains(s.Command, "--password") {
			bad(name, "passes a password on its command line")
		}
	}
	for pool := range pools {
		if !poolsServed[pool] {
			probs = append(probs, fmt.Sprintf("no worker service serves the pool %s of accounts.conf", pool))
		}
	}
	for _, c := range []string{"nats", "provision", "scheduler", "narrator", "skillworker", "console"} {
		if components[c] == 0 {
			probs = append(probs, "no "+c+" service")
		}
	}
	return probs
}

// mountsVolume says whether a service mounts a named volume (not a host
// folder) at target.
func mountsVolume(s types.ServiceConfig, target string) bool {
	return slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeVolume && v.Target == target && v.Source != ""
	})
}

// passwordRef is a variable reference in the compose file whose name
// says it holds a secret, with what follows its name.
var passwordRef = regexp.MustCompile(`\$\{([A-Z0-9_]*PASSWORD[A-Z0-9_]*)([^}]*)\}`)

// checkComposeText returns the secret references of the compose file's
// text that would let it start without the secret: a default (:-, -) or
// no requirement at all (only ${VAR:?message} refuses both unset and
// empty).
func checkComposeText(text string) []string {
	var probs []string
	for _, m := range passwordRef.FindAllStringSubmatch(text, -1) {
		if !strings.HasPrefix(m[2], ":?") {
			probs = append(probs, fmt.Sprintf("${%s%s}: a password must be required (${%s:?message}), never defaulted", m[1], m[2], m[1]))
		}
	}
	if regexp.MustCompile(`\$\{[A-Z0-9_]+:?-`).MatchString(text) {
		probs = append(probs, "a variable has a default (${VAR:-value}): every variable of the shipped file is required or literal")
	}
	return probs
}
