package tenancy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// Roles inside SVC. A multi-tenant deployment keeps the least privilege of
// a single-tenant one: each component connects as a user of SVC with its
// role's permissions, read from the same file as the single-tenant
// deployment's (deploy/nats/accounts.conf, the single source of the
// permissions) and rewritten for the tenant token (RolePermissions).

// roleAccount is the account of deploy/nats/accounts.conf whose users are
// the roles.
const roleAccount = "NARRATORIA"

// tenantRewrites turn a single-tenant permission subject into its
// multi-tenant form: the subjects whose session or request gains the
// tenant token, and each tenant's own state stream next to the shared
// sessions bucket.
func tenantRewrites(prefix string) map[string][]string {
	p := prefix
	return map[string][]string{
		p + ".sessions.*.reset": {p + ".sessions.*.*.reset"},
		p + ".approvals.*.*":    {p + ".approvals.*.*.*"},
		p + ".control.status.*": {p + ".control.*.status.*"},
		p + ".narrate":          {p + ".narrate.*"},
		// whoever writes session states writes and reads them in each
		// tenant's state stream too (NARRATORIA_STATE_<TENANT>, created by
		// `narratoria tenant add`): subjects <prefix>.state.<tenant>.>, read
		// by direct get (a stream name is one token, so the grant names any
		// stream, but only those subjects)
		"$KV.narratoria_sessions.>": {"$KV.narratoria_sessions.>", p + ".state.>", "$JS.API.DIRECT.GET.*." + p + ".state.>"},
	}
}

// envRef is a variable reference as a value (password: $GAME_PASSWORD),
// not a subject that starts with $ ("$JS.API.INFO").
var envRef = regexp.MustCompile(`(:\s*)\$[A-Z][A-Z0-9_]*`)

// RolePermissions reads the roles of a single-tenant accounts file (the
// users of its NARRATORIA account; the game role is left out: tenants
// take its place) and returns each role's permissions for SVC, rewritten
// for the tenant token. A role without permissions (the operator) gets
// none (everything).
func RolePermissions(accountsConf []byte, prefix string) (map[string]*jwt.Permissions, error) {
	// The file's password references ($GAME_PASSWORD) are not needed here.
	text := envRef.ReplaceAllString(string(accountsConf), `$1"unused"`)
	dir, err := os.MkdirTemp("", "narratoria-roles-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	conf := filepath.Join(dir, "accounts.conf")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, fmt.Errorf("tenancy: read the roles: %w", err)
	}
	rw := tenantRewrites(prefix)
	rewrite := func(subjects []string) jwt.StringList {
		var out jwt.StringList
		for _, s := range subjects {
			if to, ok := rw[s]; ok {
				out.Add(to...)
				continue
			}
			out.Add(s)
		}
		sort.Strings(out)
		return out
	}
	roles := map[string]*jwt.Permissions{}
	for _, u := range opts.Users {
		if u.Account == nil || u.Account.Name != roleAccount || u.Username == "game" {
			continue
		}
		if u.Permissions == nil {
			roles[u.Username] = nil
			continue
		}
		p := &jwt.Permissions{}
		if pp := u.Permissions.Publish; pp != nil {
			p.Pub.Allow, p.Pub.Deny = rewrite(pp.Allow), rewrite(pp.Deny)
		}
		if sp := u.Permissions.Subscribe; sp != nil {
			p.Sub.Allow, p.Sub.Deny = rewrite(sp.Allow), rewrite(sp.Deny)
		}
		if r := u.Permissions.Response; r != nil {
			p.Resp = &jwt.ResponsePermission{MaxMsgs: r.MaxMsgs, Expires: r.Expires}
		}
		roles[u.Username] = p
	}
	if len(roles) == 0 {
		return nil, fmt.Errorf("tenancy: no roles in the %s account", roleAccount)
	}
	return roles, nil
}

// RoleCreds writes <dir>/roles/<role>.creds for each role: a user of SVC
// with the role's permissions (nil: none), and returns their paths by
// role. Components of a multi-tenant deployment connect with them, each
// with the inbox prefix its permissions name.
func (a *Authority) RoleCreds(roles map[string]*jwt.Permissions) (map[string]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(a.dir, "roles"), 0o700); err != nil {
		return nil, fmt.Errorf("tenancy: %w", err)
	}
	out := map[string]string{}
	names := make([]string, 0, len(roles))
	for r := range roles {
		names = append(names, r)
	}
	slices.Sort(names)
	for _, r := range names {
		if err := checkName(strings.ReplaceAll(strings.ToLower(r), "_", "-")); err != nil {
			return nil, fmt.Errorf("tenancy: role %q: %w", r, err)
		}
		creds, err := newUserCreds(a.svc, "role-"+r, roles[r])
		if err != nil {
			return nil, err
		}
		path := filepath.Join(a.dir, "roles", r+".creds")
		if err := writeFile(path, creds); err != nil {
			return nil, err
		}
		out[r] = path
	}
	return out, nil
}
