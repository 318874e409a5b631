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
		// the game servers' prompts the narrator takes at intake
		p + ".prompts.*": {p + ".prompts.*.*"},
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
	users, err := confUsers(accountsConf)
	if err != nil {
		return nil, err
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
	for _, u := range users {
		if u.Username == "game" {
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

// confUsers reads the users of the NARRATORIA account of an accounts
// file (deploy/nats/accounts.conf).
func confUsers(accountsConf []byte) ([]*server.User, error) {
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
	var users []*server.User
	for _, u := range opts.Users {
		if u.Account != nil && u.Account.Name == roleAccount {
			users = append(users, u)
		}
	}
	return users, nil
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

// GameInbox is the inbox prefix a game server's user may read its replies
// on (nats.inboxPrefix, nats CLI --inbox-prefix): no other.
const GameInbox = "_INBOX_game"

// GameCredsFile is the name, in an authority's directory, of the game
// server's credentials `narratoria up` writes: a user of the service
// account with the game role's permissions (GamePermissions), what a
// single game's server connects with.
const GameCredsFile = "game.creds"

// GamePermissions are the game role's permissions for the subject prefix
// prefix, the one definition: deploy/nats/accounts.conf's game user
// carries the same (TestGameRoleIsDefinedOnce), and `narratoria up` mints
// its game.creds with them. A game server sends prompts (stored by the
// narrator, which checks them), narrate requests, session resets,
// approval decisions (stored by a scheduler, which checks them) and plan
// control requests; it reads narrations, a model's prose, progress, events and health, the
// asset store's objects, and its own replies (GameInbox) — no plan, job,
// outcome, result, bucket or stream of its own writing.
func GamePermissions(prefix string) *jwt.Permissions {
	p := &jwt.Permissions{}
	p.Pub.Allow.Add(
		prefix+".prompts.*", prefix+".narrate", prefix+".sessions.*.reset", prefix+".approvals.*.*", prefix+".control.>",
		"$JS.API.INFO", "$JS.API.STREAM.INFO.OBJ_narratoria_assets",
		"$JS.API.DIRECT.GET.OBJ_narratoria_assets.>",
		"$JS.API.CONSUMER.CREATE.OBJ_narratoria_assets", "$JS.API.CONSUMER.CREATE.OBJ_narratoria_assets.>",
		"$JS.API.CONSUMER.DELETE.OBJ_narratoria_assets.*", "$JS.FC.OBJ_narratoria_assets.>",
	)
	p.Sub.Allow.Add(prefix+".narrations.>", prefix+".progress.>", prefix+".events.>", prefix+".health.>", prefix+".prose.>", GameInbox+".>")
	return p
}

// GameCreds writes <dir>/game.creds (GameCredsFile): a user of SVC with
// the game role's permissions, and returns its path. It is written once
// and kept (revoke a leaked one by rotating the service account's users).
func (a *Authority) GameCreds() (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	path := filepath.Join(a.dir, GameCredsFile)
	if _, err := loadOrCreate(path, func() (string, error) { return newUserCreds(a.svc, "game", GamePermissions(a.prefix)) }); err != nil {
		return "", err
	}
	return path, nil
}

// CredsInboxPrefix returns the inbox prefix a credentials file's user must
// use — the one inbox its subscribe permissions allow (GameInbox for
// game.creds, a worker pool's WorkerInbox) — or "" when it may read any
// (or the file holds no user JWT).
func CredsInboxPrefix(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	j, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return ""
	}
	uc, err := jwt.DecodeUserClaims(j)
	if err != nil || len(uc.Sub.Allow) == 0 {
		return ""
	}
	inbox := ""
	for _, s := range uc.Sub.Allow {
		if strings.HasPrefix(s, "_INBOX") && strings.HasSuffix(s, ".>") {
			if inbox != "" {
				return ""
			}
			inbox = strings.TrimSuffix(s, ".>")
		}
	}
	return inbox
}
