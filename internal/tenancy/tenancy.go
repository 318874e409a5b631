// Package tenancy runs Narratoria multi-tenant with NATS decentralised (JWT)
// authentication.
//
// An Authority keeps, in one directory, an operator and three kinds of
// accounts, each signed by the operator:
//
//   - SYS, the operator's system account (used to push account JWTs);
//   - SVC, the service account that runs every component and owns every
//     JetStream stream (JetStream with unlimited limits);
//   - one account per tenant, without JetStream.
//
// SVC exports, with the tenant name as the token right after the kind,
//
//	services  P.prompts.*.*  P.narrate.*  P.sessions.*.*.reset  P.approvals.*.*.*  P.control.*.>
//	streams   P.narrations.*.>  P.prose.*.>  P.results.*.>  P.progress.*.>  P.events.*.>  P.health.*.>
//
// and every tenant account imports them renamed (jwt.Import.LocalSubject) so
// that the tenant sees subjects without its own name: a tenant's request on
// P.prompts.s1 arrives in SVC on P.prompts.<tenant>.s1 (replies, JetStream
// PubAcks included, flow back), and SVC's publish on P.narrations.<tenant>.s1
// reaches the tenant's subscribers on P.narrations.s1.
//
// The exports are token-required (private). Each tenant import carries an
// activation token, signed by the SVC account key, whose subject is narrowed
// to the tenant's own subjects (P.prompts.<tenant>.* and so on), so one
// tenant cannot import another's and the SVC JWT never changes when tenants
// are added. nats-server checks that the import subject lies within the
// activation's subject.
//
// Layout of the directory (created 0700; seeds and creds 0600):
//
//	prefix                      the subject prefix the authority was made for
//	operator.nk operator.jwt
//	sys.nk sys.jwt sys.creds
//	svc.nk svc.jwt svc.creds
//	narratoria.creds            the operator's clients (CLI, nats CLI)
//	game.creds                  a single game's server (the game role: GamePermissions)
//	tenants/<name>.nk .jwt .creds
//	resolver/                   the full account resolver's store (Configure, ServerConfig)
//
// Revocation: Revoke revokes every user of a tenant ("*" in the account JWT)
// and Rotate revokes the current user key and issues a new one. A changed
// account JWT takes effect on a running server once pushed (Push, PushAll);
// the server then closes the connections of revoked users.
package tenancy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/messages"
)

// Limits of a tenant account.
type Limits struct {
	// MaxConnections is the most client connections the tenant may hold; 0 is unlimited.
	MaxConnections int64
	// MaxPayload is the largest message payload the tenant may publish, in bytes; 0 is unlimited.
	MaxPayload int64
	// Weight is the tenant's share of a skill whose workers are saturated
	// against the other tenants' (§12): a tenant of weight 3 is served
	// three jobs for one of a tenant of weight 1. It is kept with the
	// tenant's account (a tag of its JWT) and put in its state stream's
	// metadata, where the schedulers read it. 0 keeps the weight the
	// tenant has (WeightDefault for a new one).
	Weight int
}

// WeightDefault is a tenant's weight unless it was given one.
const WeightDefault = 1

// weightTag is the account JWT tag that keeps a tenant's weight
// (weightTag + the number).
const weightTag = "narratoria-weight:"

// Tenant describes a tenant account kept by an Authority.
type Tenant struct {
	// Name is the tenant name, the token inserted into SVC subjects.
	Name string
	// Account is the tenant account's public key.
	Account string
	// Revoked reports whether every user of the tenant is revoked (Revoke).
	Revoked bool
	// Weight is the tenant's share of saturated skills (Limits.Weight).
	Weight int
}

// Authority keeps the operator, SYS, SVC and tenant keys and JWTs in a directory.
type Authority struct {
	dir    string
	prefix string

	mu          sync.Mutex // serialises tenant changes
	operator    nkeys.KeyPair
	operatorJWT string
	sys         nkeys.KeyPair
	svc         nkeys.KeyPair
}

// service and stream kinds exported by SVC. The service kinds list the local
// subject's tokens after the kind ("*" tokens and a final ">" allowed).
var (
	serviceKinds = []struct{ kind, rest string }{
		{"prompts", "*"},
		{"narrate", ""},
		{"sessions", "*.reset"},
		{"approvals", "*.*"},
		{"control", ">"},
	}
	streamKinds = []string{"narrations", "prose", "results", "progress", "events", "health"}
)

// lookups are the JetStream reads SVC serves each tenant, narrowed to its
// own subjects: a direct get of the last message of a subject of a stream
// ($JS.API.DIRECT.GET.<stream>.<subject>), so a tenant's console finds the
// result of a plan that ended before it looked. The tenant token goes
// after the subject's kind, as everywhere.
var lookups = []struct{ name, stream, kind string }{
	{"results-lookup", "NARRATORIA_RESULTS", "results"},
}

// lookupSubject is the API subject of a direct get on stream of the
// subjects <prefix>.<kind>.<tenant>.> (tenant "*" for the export, "" for
// the tenant's own view).
func (a *Authority) lookupSubject(stream, kind, tenant string) string {
	return join("$JS.API.DIRECT.GET", stream, a.prefix, kind, tenant, ">")
}

// join joins non-empty subject parts with dots.
func join(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// Open creates what is missing of an authority in dir (the operator, SYS and
// SVC keys, JWTs and creds) and loads what exists. It is idempotent. prefix
// is the subject prefix (for example "narratoria"); an existing authority
// made for another prefix is refused.
func Open(dir, prefix string) (*Authority, error) {
	if !server.IsValidLiteralSubject(prefix) {
		return nil, fmt.Errorf("tenancy: invalid subject prefix %q", prefix)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{dir, filepath.Join(dir, "tenants"), filepath.Join(dir, "resolver")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("tenancy: %w", err)
		}
	}
	a := &Authority{dir: dir, prefix: prefix}

	prefixFile := filepath.Join(dir, "prefix")
	if b, err := os.ReadFile(prefixFile); err == nil {
		if got := strings.TrimSpace(string(b)); got != prefix {
			return nil, fmt.Errorf("tenancy: %s was created for prefix %q, not %q", dir, got, prefix)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		if err := writeFile(prefixFile, prefix+"\n"); err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("tenancy: %w", err)
	}

	if a.operator, err = loadOrCreateKey(filepath.Join(dir, "operator.nk"), nkeys.CreateOperator); err != nil {
		return nil, err
	}
	if a.sys, err = loadOrCreateKey(filepath.Join(dir, "sys.nk"), nkeys.CreateAccount); err != nil {
		return nil, err
	}
	if a.svc, err = loadOrCreateKey(filepath.Join(dir, "svc.nk"), nkeys.CreateAccount); err != nil {
		return nil, err
	}
	opPub, _ := a.operator.PublicKey()
	sysPub, _ := a.sys.PublicKey()

	if a.operatorJWT, err = loadOrCreate(filepath.Join(dir, "operator.jwt"), func() (string, error) {
		oc := jwt.NewOperatorClaims(opPub)
		oc.Name = "narratoria"
		oc.SystemAccount = sysPub
		return oc.Encode(a.operator)
	}); err != nil {
		return nil, err
	}
	if _, err = loadOrCreate(filepath.Join(dir, "sys.jwt"), func() (string, error) {
		ac := jwt.NewAccountClaims(sysPub)
		ac.Name = "SYS"
		return ac.Encode(a.operator)
	}); err != nil {
		return nil, err
	}
	if err := a.loadSVC(); err != nil {
		return nil, err
	}
	if _, err = loadOrCreate(a.SystemCreds(), func() (string, error) { return newCreds(a.sys, "sys") }); err != nil {
		return nil, err
	}
	if _, err = loadOrCreate(a.ServiceCreds(), func() (string, error) { return newCreds(a.svc, "svc") }); err != nil {
		return nil, err
	}
	if _, err = loadOrCreate(a.ClientCreds(), func() (string, error) { return newCreds(a.svc, "narratoria-cli") }); err != nil {
		return nil, err
	}
	return a, nil
}

// ClientCredsFile is the name, in an authority's directory, of the
// credentials of the operator's own clients: the narratoria CLI and the
// nats CLI (a SVC user without permission limits, apart from the
// components' own so either can be revoked alone). A game server uses
// GameCredsFile, the game role's least privilege.
const ClientCredsFile = "narratoria.creds"

// ClientCreds returns the path of the operator's clients' .creds file
// (ClientCredsFile).
func (a *Authority) ClientCreds() string { return filepath.Join(a.dir, ClientCredsFile) }

// ServicePublicKey returns the SVC account's public key, the name of its
// JetStream folder in the server's store.
func (a *Authority) ServicePublicKey() string {
	pub, _ := a.svc.PublicKey()
	return pub
}

// svcClaims returns the SVC account claims: JetStream unlimited, every
// export token-required.
func (a *Authority) svcClaims() *jwt.AccountClaims {
	pub, _ := a.svc.PublicKey()
	ac := jwt.NewAccountClaims(pub)
	ac.Name = "SVC"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{DiskStorage: -1, MemoryStorage: -1, Streams: -1, Consumer: -1}
	for _, k := range serviceKinds {
		ac.Exports.Add(&jwt.Export{
			Name:     k.kind,
			Subject:  jwt.Subject(join(a.prefix, k.kind, "*", k.rest)),
			Type:     jwt.Service,
			TokenReq: true,
		})
	}
	for _, k := range streamKinds {
		ac.Exports.Add(&jwt.Export{
			Name:     k,
			Subject:  jwt.Subject(join(a.prefix, k, "*", ">")),
			Type:     jwt.Stream,
			TokenReq: true,
		})
	}
	for _, l := range lookups {
		ac.Exports.Add(&jwt.Export{
			Name:     l.name,
			Subject:  jwt.Subject(a.lookupSubject(l.stream, l.kind, "*")),
			Type:     jwt.Service,
			TokenReq: true,
		})
	}
	// SVC's own clients (a single-game `narratoria up`) publish prompts
	// too: its door refuses the literal wildcard session, as every
	// tenant's does.
	ac.Mappings = jwt.Mapping{}
	for src, dst := range bus.DoorMappings(a.prefix) {
		ac.Mappings[jwt.Subject(src)] = []jwt.WeightedMapping{{Subject: jwt.Subject(dst), Weight: 100}}
	}
	return ac
}

// mappingsKey describes mappings as one comparable string.
func mappingsKey(m jwt.Mapping) string {
	var keys []string
	for src, dsts := range m {
		for _, d := range dsts {
			keys = append(keys, fmt.Sprintf("%s>%s:%d", src, d.Subject, d.Weight))
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, "\n")
}

// loadSVC signs and writes the SVC account JWT if it is missing or its
// exports or JetStream limits differ from what this package makes (an
// upgrade); otherwise it leaves it alone.
func (a *Authority) loadSVC() error {
	want := a.svcClaims()
	path := filepath.Join(a.dir, "svc.jwt")
	if b, err := os.ReadFile(path); err == nil {
		have, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(b)))
		if err == nil && exportsKey(have.Exports) == exportsKey(want.Exports) && mappingsKey(have.Mappings) == mappingsKey(want.Mappings) &&
			have.Limits.JetStreamLimits == want.Limits.JetStreamLimits {
			return nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tenancy: %w", err)
	}
	s, err := want.Encode(a.operator)
	if err != nil {
		return fmt.Errorf("tenancy: sign SVC: %w", err)
	}
	return writeFile(path, s)
}

// exportsKey describes exports as one comparable string.
func exportsKey(es jwt.Exports) string {
	var keys []string
	for _, e := range es {
		keys = append(keys, fmt.Sprintf("%s %s %t", e.Type, e.Subject, e.TokenReq))
	}
	sort.Strings(keys)
	return strings.Join(keys, "\n")
}

// Dir returns the authority's directory (absolute).
func (a *Authority) Dir() string { return a.dir }

// ServiceCreds returns the path of a .creds file for a SVC user without
// permission limits; Narratoria's components connect with it.
func (a *Authority) ServiceCreds() string { return filepath.Join(a.dir, "svc.creds") }

// SystemCreds returns the path of a .creds file for a SYS user, used to push
// account JWTs (Push, PushAll).
func (a *Authority) SystemCreds() string { return filepath.Join(a.dir, "sys.creds") }

// accountJWTs returns every account's current JWT by public key: SYS, SVC and
// the tenants.
func (a *Authority) accountJWTs() (map[string]string, error) {
	out := map[string]string{}
	files := []string{filepath.Join(a.dir, "sys.jwt"), filepath.Join(a.dir, "svc.jwt")}
	tenants, err := filepath.Glob(filepath.Join(a.dir, "tenants", "*.jwt"))
	if err != nil {
		return nil, err
	}
	sort.Strings(tenants)
	for _, f := range append(files, tenants...) {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("tenancy: %w", err)
		}
		ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("tenancy: %s: %w", f, err)
		}
		out[ac.Subject] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// Configure puts opts in operator mode for an embedded server: the trusted
// operator, the system account, and a full directory account resolver under
// <dir>/resolver that allows deletes and is preloaded with SYS, SVC and every
// tenant's current JWT. Call it once per server.
func (a *Authority) Configure(opts *server.Options) error {
	oc, err := jwt.DecodeOperatorClaims(a.operatorJWT)
	if err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	jwts, err := a.accountJWTs()
	if err != nil {
		return err
	}
	res, err := server.NewDirAccResolver(filepath.Join(a.dir, "resolver"), 0, 0, server.RenameDeleted)
	if err != nil {
		return fmt.Errorf("tenancy: resolver: %w", err)
	}
	for pub, j := range jwts {
		if err := res.Store(pub, j); err != nil {
			res.Close()
			return fmt.Errorf("tenancy: preload %s: %w", pub, err)
		}
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.SystemAccount = oc.SystemAccount
	opts.AccountResolver = res
	return nil
}

// ServerConfig returns what Configure sets, as a nats-server configuration
// file fragment, for a nats-server process. If the account JWTs cannot be
// read, the fragment has no resolver_preload block.
func (a *Authority) ServerConfig() string {
	sysPub, _ := a.sys.PublicKey()
	var b strings.Builder
	fmt.Fprintf(&b, "operator: %s\n", strconv.Quote(filepath.Join(a.dir, "operator.jwt")))
	fmt.Fprintf(&b, "system_account: %s\n", sysPub)
	fmt.Fprintf(&b, "resolver {\n  type: full\n  dir: %s\n  allow_delete: true\n}\n",
		strconv.Quote(filepath.Join(a.dir, "resolver")))
	jwts, err := a.accountJWTs()
	if err != nil || len(jwts) == 0 {
		return b.String()
	}
	keys := make([]string, 0, len(jwts))
	for k := range jwts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("resolver_preload {\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", k, strconv.Quote(jwts[k]))
	}
	b.WriteString("}\n")
	return b.String()
}

func (a *Authority) tenantPath(name, ext string) string {
	return filepath.Join(a.dir, "tenants", name+ext)
}

func checkName(name string) error {
	if _, err := messages.ParseTenant(name); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	return nil
}

// loadTenant returns the tenant's account key and claims (nil claims if the
// tenant has no JWT yet).
func (a *Authority) loadTenant(name string, create bool) (nkeys.KeyPair, *jwt.AccountClaims, error) {
	if err := checkName(name); err != nil {
		return nil, nil, err
	}
	seedPath := a.tenantPath(name, ".nk")
	if !create {
		if _, err := os.Stat(seedPath); err != nil {
			return nil, nil, fmt.Errorf("tenancy: %w %q (narratoria tenant ls lists them)", ErrUnknownTenant, name)
		}
	}
	kp, err := loadOrCreateKey(seedPath, nkeys.CreateAccount)
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(a.tenantPath(name, ".jwt"))
	if errors.Is(err, os.ErrNotExist) {
		return kp, nil, nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("tenancy: %w", err)
	}
	ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, nil, fmt.Errorf("tenancy: tenant %q: %w", name, err)
	}
	return kp, ac, nil
}

// signTenant (re)builds the tenant's imports with activation tokens, signs
// the claims with the operator and writes the JWT.
func (a *Authority) signTenant(name string, ac *jwt.AccountClaims) error {
	ac.Name = name
	ac.Imports = nil
	svcPub, _ := a.svc.PublicKey()
	for _, k := range serviceKinds {
		remote := join(a.prefix, k.kind, name, k.rest)
		tok, err := a.activation(ac.Subject, remote, jwt.Service)
		if err != nil {
			return err
		}
		ac.Imports.Add(&jwt.Import{
			Name:         k.kind,
			Subject:      jwt.Subject(remote),
			LocalSubject: jwt.RenamingSubject(join(a.prefix, k.kind, k.rest)),
			Account:      svcPub,
			Token:        tok,
			Type:         jwt.Service,
		})
	}
	for _, k := range streamKinds {
		remote := join(a.prefix, k, name, ">")
		tok, err := a.activation(ac.Subject, remote, jwt.Stream)
		if err != nil {
			return err
		}
		ac.Imports.Add(&jwt.Import{
			Name:         k,
			Subject:      jwt.Subject(remote),
			LocalSubject: jwt.RenamingSubject(join(a.prefix, k, ">")),
			Account:      svcPub,
			Token:        tok,
			Type:         jwt.Stream,
		})
	}
	for _, l := range lookups {
		remote := a.lookupSubject(l.stream, l.kind, name)
		tok, err := a.activation(ac.Subject, remote, jwt.Service)
		if err != nil {
			return err
		}
		ac.Imports.Add(&jwt.Import{
			Name:         l.name,
			Subject:      jwt.Subject(remote),
			LocalSubject: jwt.RenamingSubject(a.lookupSubject(l.stream, l.kind, "")),
			Account:      svcPub,
			Token:        tok,
			Type:         jwt.Service,
		})
	}
	// A prompt on the literal <prefix>.prompts.* is refused in the tenant's
	// own account, before the import (bus.DoorMappings says why).
	ac.Mappings = jwt.Mapping{}
	for src, dst := range bus.DoorMappings(a.prefix) {
		ac.AddMapping(jwt.Subject(src), jwt.WeightedMapping{Subject: jwt.Subject(dst), Weight: 100})
	}
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return fmt.Errorf("tenancy: tenant %q: invalid account claims: %v", name, errs)
	}
	s, err := ac.Encode(a.operator)
	if err != nil {
		return fmt.Errorf("tenancy: sign tenant %q: %w", name, err)
	}
	return writeFile(a.tenantPath(name, ".jwt"), s+"\n")
}

// activation returns an activation token signed by SVC that lets account
// import subject.
func (a *Authority) activation(account, subject string, kind jwt.ExportType) (string, error) {
	act := jwt.NewActivationClaims(account)
	act.Name = subject
	act.ImportSubject = jwt.Subject(subject)
	act.ImportType = kind
	tok, err := act.Encode(a.svc)
	if err != nil {
		return "", fmt.Errorf("tenancy: activation for %s: %w", subject, err)
	}
	return tok, nil
}

// AddTenant creates the tenant account (or, if it exists, re-signs it with
// the new limits, keeping its credentials and revocations) and, if it has
// none, a user; it writes <dir>/tenants/<name>.creds, with the account
// seed and JWT next to it, and returns the creds path. A removed tenant
// (Revoke) is not brought back: that is ErrTenantRevoked (Readd does it).
// A running server learns of the account JWT when it is pushed (Push,
// PushAll) or, for a new tenant, when the server looks the account up in
// its resolver directory.
func (a *Authority) AddTenant(name string, l Limits) (credsPath string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	kp, ac, err := a.loadTenant(name, true)
	if err != nil {
		return "", err
	}
	if ac == nil {
		pub, _ := kp.PublicKey()
		ac = jwt.NewAccountClaims(pub)
	} else if _, revoked := ac.Revocations[jwt.All]; revoked {
		return "", fmt.Errorf("tenancy: %w: %q (re-add it to give it new credentials)", ErrTenantRevoked, name)
	}
	if err := applyLimits(name, ac, l); err != nil {
		return "", err
	}
	if err := a.signTenant(name, ac); err != nil {
		return "", err
	}
	credsPath = a.tenantPath(name, ".creds")
	if _, err := loadOrCreate(credsPath, func() (string, error) { return newUserCreds(kp, name, a.tenantUserPerms()) }); err != nil {
		return "", err
	}
	return credsPath, nil
}

// Weight returns a tenant's weight (WeightDefault when it has none).
func (a *Authority) Weight(name string) (int, error) {
	_, ac, err := a.loadTenant(name, false)
	if err != nil {
		return 0, err
	}
	if ac == nil {
		return WeightDefault, nil
	}
	return max(weightOf(ac), WeightDefault), nil
}

// weightOf reads the weight tag of a tenant's claims (0 when it has none).
func weightOf(ac *jwt.AccountClaims) int {
	for _, t := range ac.Tags {
		if v, ok := strings.CutPrefix(t, weightTag); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// setWeight replaces the weight tag of a tenant's claims.
func setWeight(ac *jwt.AccountClaims, w int) {
	var keep jwt.TagList
	for _, t := range ac.Tags {
		if !strings.HasPrefix(t, weightTag) {
			keep = append(keep, t)
		}
	}
	ac.Tags = append(keep, weightTag+strconv.Itoa(w))
}

// Readd brings a removed tenant back (Revoke undone) with the given
// limits and new credentials, written to <dir>/tenants/<name>.creds: its
// earlier credentials stay refused. The account JWT must then be pushed.
// A tenant that was not removed is ErrTenantRevoked's opposite: nothing
// to undo, an error naming that.
func (a *Authority) Readd(name string, l Limits) (credsPath string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	kp, ac, err := a.loadTenant(name, false)
	if err != nil {
		return "", err
	}
	if ac == nil {
		return "", fmt.Errorf("tenancy: tenant %q has no account JWT", name)
	}
	if _, revoked := ac.Revocations[jwt.All]; !revoked {
		return "", fmt.Errorf("tenancy: tenant %q was not removed: nothing to re-add", name)
	}
	if err := applyLimits(name, ac, l); err != nil {
		return "", err
	}
	return a.reissue(name, kp, ac)
}

// applyLimits writes a tenant's limits into its account claims: the
// connection and payload limits, and its weight (kept when l has none).
func applyLimits(name string, ac *jwt.AccountClaims, l Limits) error {
	if l.Weight < 0 {
		return fmt.Errorf("tenancy: tenant %q: weight %d: want a positive integer", name, l.Weight)
	}
	ac.Limits.Conn = unlimited(l.MaxConnections)
	ac.Limits.Payload = unlimited(l.MaxPayload)
	if l.Weight > 0 || weightOf(ac) == 0 {
		setWeight(ac, cmp.Or(l.Weight, WeightDefault))
	}
	return nil
}

// reissue revokes the tenant's current user by key, lifts a blanket
// revocation, signs the account and writes new credentials; a.mu held.
func (a *Authority) reissue(name string, kp nkeys.KeyPair, ac *jwt.AccountClaims) (string, error) {
	credsPath := a.tenantPath(name, ".creds")
	if old, err := credsUser(credsPath); err == nil {
		ac.Revoke(old)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	// Every earlier user was the current one once and is revoked by key, so
	// a blanket revocation (Revoke) is no longer needed and would also catch
	// a user issued within the same second.
	delete(ac.Revocations, jwt.All)
	if err := a.signTenant(name, ac); err != nil {
		return "", err
	}
	creds, err := newUserCreds(kp, name, a.tenantUserPerms())
	if err != nil {
		return "", err
	}
	if err := writeFile(credsPath, creds); err != nil {
		return "", err
	}
	return credsPath, nil
}

func unlimited(n int64) int64 {
	if n <= 0 {
		return jwt.NoLimit
	}
	return n
}

// Tenants lists the tenants, sorted by name.
func (a *Authority) Tenants() ([]Tenant, error) {
	files, err := filepath.Glob(filepath.Join(a.dir, "tenants", "*.jwt"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Tenant
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".jwt")
		_, ac, err := a.loadTenant(name, false)
		if err != nil {
			return nil, err
		}
		_, revoked := ac.Revocations[jwt.All]
		out = append(out, Tenant{Name: name, Account: ac.Subject, Revoked: revoked, Weight: max(weightOf(ac), WeightDefault)})
	}
	return out, nil
}

// Rotate issues the tenant a new user and revokes every older one (by key,
// in the account JWT, which must then be pushed). It returns the creds
// path. A removed tenant is ErrTenantRevoked: Readd brings it back.
func (a *Authority) Rotate(name string) (credsPath string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	kp, ac, err := a.loadTenant(name, false)
	if err != nil {
		return "", err
	}
	if ac == nil {
		return "", fmt.Errorf("tenancy: tenant %q has no account JWT", name)
	}
	if _, revoked := ac.Revocations[jwt.All]; revoked {
		return "", fmt.Errorf("tenancy: %w: %q (re-add it to give it new credentials)", ErrTenantRevoked, name)
	}
	return a.reissue(name, kp, ac)
}

// Revoke revokes every user of the tenant (revocation "*" at now, and the
// current user by key). Once the account JWT is pushed, the server closes
// the tenant's connections and refuses its creds; Readd brings it back
// with new ones. A tenant removed already is ErrTenantRevoked, and
// nothing changes.
func (a *Authority) Revoke(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ac, err := a.loadTenant(name, false)
	if err != nil {
		return err
	}
	if ac == nil {
		return fmt.Errorf("tenancy: tenant %q has no account JWT", name)
	}
	if _, revoked := ac.Revocations[jwt.All]; revoked {
		return fmt.Errorf("tenancy: %w already: %q", ErrTenantRevoked, name)
	}
	ac.Revoke(jwt.All)
	if cur, err := credsUser(a.tenantPath(name, ".creds")); err == nil {
		ac.Revoke(cur)
	}
	return a.signTenant(name, ac)
}

// AccountJWT returns the tenant's current account JWT.
func (a *Authority) AccountJWT(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	b, err := os.ReadFile(a.tenantPath(name, ".jwt"))
	if err != nil {
		return "", fmt.Errorf("tenancy: tenant %q: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Push sends an account JWT to the servers through nc, which must be
// connected with SystemCreds, on $SYS.REQ.CLAIMS.UPDATE, and checks that the
// reply reports success. In a cluster the first reply is checked; full
// resolvers share updates among themselves.
func Push(ctx context.Context, nc *nats.Conn, accountJWT string) error {
	msg, err := nc.RequestWithContext(ctx, "$SYS.REQ.CLAIMS.UPDATE", []byte(accountJWT))
	if err != nil {
		return fmt.Errorf("tenancy: push: %w", err)
	}
	var resp server.ServerAPIClaimUpdateResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("tenancy: push: bad reply %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("tenancy: push %s: %s (code %d)", resp.Error.Account, resp.Error.Description, resp.Error.Code)
	}
	if resp.Data == nil || resp.Data.Code/100 != 2 {
		return fmt.Errorf("tenancy: push: unexpected reply %q", msg.Data)
	}
	return nil
}

// PushAll pushes the SVC and every tenant account JWT (SYS is left alone:
// it never changes) through nc, connected with SystemCreds.
func (a *Authority) PushAll(ctx context.Context, nc *nats.Conn) error {
	jwts, err := a.accountJWTs()
	if err != nil {
		return err
	}
	sysPub, _ := a.sys.PublicKey()
	delete(jwts, sysPub)
	keys := make([]string, 0, len(jwts))
	for k := range jwts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := Push(ctx, nc, jwts[k]); err != nil {
			return err
		}
	}
	return nil
}

// newCreds issues a user of the account and returns its creds file content.
// tenantUserPerms are what a tenant's users may publish: what the game
// role of deploy/nats/accounts.conf may (prompts, narrate, session resets,
// approvals, plan control), the lookups of their own results, and the
// JetStream info calls a client makes (answered "not enabled": the
// tenant's account has no JetStream). A prompt on the literal
// <prefix>.prompts.* is mapped to a subject with an empty token, none of
// these: the server tells its publisher so ("Permissions Violation"); one
// on <prefix>.prompts.> reaches the narrator, which refuses it (a session
// must be a subject token).
func (a *Authority) tenantUserPerms() *jwt.Permissions {
	p := &jwt.Permissions{}
	p.Pub.Allow.Add(join(a.prefix, "prompts", "*"), join(a.prefix, "narrate"), join(a.prefix, "sessions", "*", "reset"),
		join(a.prefix, "approvals", "*", "*"), join(a.prefix, "control", ">"), "$JS.API.INFO", "$JS.API.STREAM.INFO.*")
	for _, l := range lookups {
		p.Pub.Allow.Add(a.lookupSubject(l.stream, l.kind, ""))
	}
	return p
}

func newCreds(account nkeys.KeyPair, name string) (string, error) {
	return newUserCreds(account, name, nil)
}

// newUserCreds is newCreds with the user's permissions (nil: none).
func newUserCreds(account nkeys.KeyPair, name string, perms *jwt.Permissions) (string, error) {
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	pub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	if perms != nil {
		uc.Permissions = *perms
	}
	ujwt, err := uc.Encode(account)
	if err != nil {
		return "", fmt.Errorf("tenancy: sign user: %w", err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		return "", err
	}
	return string(creds), nil
}

// credsUser returns the public key of the user in a creds file.
func credsUser(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	j, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return "", fmt.Errorf("tenancy: %s: %w", path, err)
	}
	uc, err := jwt.DecodeUserClaims(j)
	if err != nil {
		return "", fmt.Errorf("tenancy: %s: %w", path, err)
	}
	return uc.Subject, nil
}

// loadOrCreateKey reads an nkey seed from path or creates one there.
func loadOrCreateKey(path string, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	seed, err := loadOrCreate(path, func() (string, error) {
		kp, err := create()
		if err != nil {
			return "", err
		}
		s, err := kp.Seed()
		return string(s) + "\n", err
	})
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(seed)))
	if err != nil {
		return nil, fmt.Errorf("tenancy: %s: %w", path, err)
	}
	return kp, nil
}

// loadOrCreate returns the content of path, first writing create's result
// there if the file does not exist.
func loadOrCreate(path string, create func() (string, error)) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("tenancy: %w", err)
	}
	s, err := create()
	if err != nil {
		return "", fmt.Errorf("tenancy: create %s: %w", filepath.Base(path), err)
	}
	if err := writeFile(path, s); err != nil {
		return "", err
	}
	return strings.TrimSpace(s), nil
}

// writeFile replaces path atomically with a 0600 file holding s.
func writeFile(path, s string) error {
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(s); err != nil {
		tmp.Close()
		return fmt.Errorf("tenancy: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("tenancy: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	return nil
}
