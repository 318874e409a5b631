package check

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// deployDir is deploy/, seen from this package's folder.
const deployDir = ".."

// readDeploy reads a file of deploy/.
func readDeploy(name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		return nil, fmt.Errorf("read deploy/%s: %w", name, err)
	}
	return b, nil
}

// poolLine is the comment `narratoria creds worker --conf` writes above
// each pool's user block in accounts.conf.
var poolLine = regexp.MustCompile("Made by `narratoria creds worker --conf --pool ([A-Za-z0-9_-]+) --skills ([A-Za-z0-9_,-]+)`")

// workerPools reads the pools of skill workers accounts.conf ships, each
// with the skills its user is scoped to (sorted).
func workerPools() (map[string][]string, error) {
	b, err := readDeploy("nats/accounts.conf")
	if err != nil {
		return nil, err
	}
	pools := map[string][]string{}
	for _, m := range poolLine.FindAllStringSubmatch(string(b), -1) {
		skills := strings.Split(m[2], ",")
		sort.Strings(skills)
		pools[m[1]] = skills
		if !strings.Contains(string(b), "user: worker_"+m[1]+",") {
			return nil, fmt.Errorf("accounts.conf: pool %s has no user worker_%s", m[1], m[1])
		}
	}
	if len(pools) == 0 {
		return nil, fmt.Errorf("accounts.conf: no worker pool")
	}
	return pools, nil
}

// secretNames are the variables deploy/gen-secrets.sh writes (sorted).
func secretNames() ([]string, error) {
	b, err := readDeploy("gen-secrets.sh")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b[A-Z][A-Z0-9_]*_PASSWORD\b`).FindAllString(string(b), -1) {
		seen[m] = true
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out, nil
}

// confVarRef is a variable used as a value in a nats-server config
// (password: $GAME_PASSWORD, routes: [ $NATS_ROUTE_1 ]), not a subject
// that starts with $ ("$JS.API.INFO", "$KV.…").
var confVarRef = regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)(?:[^.A-Za-z0-9_]|$)`)

// natsConfVars are the variables the shipped nats-server configs read
// (sorted).
func natsConfVars() ([]string, error) {
	seen := map[string]bool{}
	for _, f := range []string{"nats/accounts.conf", "nats/nats-1.conf", "nats/nats-2.conf", "nats/nats-3.conf"} {
		b, err := readDeploy(f)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range confVarRef.FindAllStringSubmatch(line, -1) {
				seen[m[1]] = true
			}
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out, nil
}
