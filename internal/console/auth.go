package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Role is what a console user may do. Each role may do what the ones
// below it may.
type Role string

// The console's roles, from least to most.
const (
	// RoleViewer reads everything and changes nothing.
	RoleViewer Role = "viewer"
	// RoleGameMaster also approves and denies tools, cancels plans and
	// sends prompts.
	RoleGameMaster Role = "gamemaster"
	// RoleOperator may do everything, session resets included.
	RoleOperator Role = "operator"
)

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleGameMaster:
		return 2
	case RoleOperator:
		return 3
	}
	return 0
}

// Allows says whether a user of role r may do what needs role need.
func (r Role) Allows(need Role) bool { return r.rank() > 0 && r.rank() >= need.rank() }

// title is the role as the console names it to people.
func (r Role) title() string {
	if r == RoleGameMaster {
		return "game master"
	}
	return string(r)
}

// ParseRole reads a role: viewer, gamemaster (also game-master, game
// master, gm) or operator, in any case.
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return RoleViewer, nil
	case "gamemaster", "game-master", "game master", "game_master", "gm":
		return RoleGameMaster, nil
	case "operator":
		return RoleOperator, nil
	}
	return "", fmt.Errorf("%q must be viewer, gamemaster or operator", s)
}

// User is a console login: a name, a role, and a bcrypt password hash, a
// token hash (TokenHashOf), or both.
type User struct {
	Name         string
	Role         Role
	PasswordHash string
	TokenHash    string
}

// TrustedProxy takes the user (and maybe the role) from headers a single
// sign-on proxy in front of the console sets, only on requests that come
// from one of Sources; from anywhere else the headers are ignored.
type TrustedProxy struct {
	// Sources are the proxy's addresses.
	Sources []netip.Prefix
	// UserHeader names the header with the signed-in user, e.g.
	// X-Forwarded-User.
	UserHeader string
	// RoleHeader, if set, names the header with the user's role.
	RoleHeader string
	// Roles maps user names to roles, used when RoleHeader is empty or
	// absent from a request.
	Roles map[string]Role
	// DefaultRole is the role of a proxied user neither gives one ("" refuses
	// such a user).
	DefaultRole Role
}

// trusted says whether a request's peer is one of the proxy's sources
// and the proxy signs users in (UserHeader).
func (p *TrustedProxy) trusted(remoteAddr string) bool {
	return p != nil && p.UserHeader != "" && p.from(remoteAddr)
}

// from says whether a request's peer is one of the proxy's sources.
func (p *TrustedProxy) from(remoteAddr string) bool {
	if p == nil {
		return false
	}
	ip, err := netip.ParseAddr(peerIP(remoteAddr))
	return err == nil && p.contains(ip)
}

func (p *TrustedProxy) contains(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, s := range p.Sources {
		if s.Contains(ip) {
			return true
		}
	}
	return false
}

// clientAddr is the address a request comes from: its peer, or, when the
// peer is the trusted proxy, the last address of X-Forwarded-For that is
// not one of the proxy's own (what the proxy saw). From anywhere else the
// header is ignored: a client cannot choose the address it is throttled
// and audited under.
func (p *TrustedProxy) clientAddr(r *http.Request) string {
	peer := peerIP(r.RemoteAddr)
	if !p.from(r.RemoteAddr) {
		return peer
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		ip, err := netip.ParseAddr(strings.Trim(strings.TrimSpace(hops[i]), "[]"))
		if err != nil {
			return peer // a hop the proxy did not write: trust nothing before it
		}
		if !p.contains(ip) {
			return ip.Unmap().String()
		}
	}
	return peer
}

// https says whether a request reached the console over HTTPS: its own
// TLS, or the trusted proxy's X-Forwarded-Proto (its last value, the one
// the proxy set) saying https.
func (p *TrustedProxy) https(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !p.from(r.RemoteAddr) {
		return false
	}
	vals := strings.Split(strings.Join(r.Header.Values("X-Forwarded-Proto"), ","), ",")
	return strings.EqualFold(strings.TrimSpace(vals[len(vals)-1]), "https")
}

// Identity is who a request comes from.
type Identity struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Via is how they signed in: password, token or proxy.
	Via string `json:"via"`
}

type identityKey struct{}

// identityOf is the signed-in user of a request that passed the auth
// middleware.
func identityOf(r *http.Request) Identity {
	id, _ := r.Context().Value(identityKey{}).(Identity)
	return id
}

// PasswordCost is the bcrypt cost of HashPassword: bcrypt's default.
// Tests lower it (a check at the default takes a second under the race
// detector); nothing else should.
var PasswordCost = bcrypt.DefaultCost

// HashPassword returns the bcrypt hash of a password, as the console's
// configuration takes it (passwordHash).
func HashPassword(password string) (string, error) {
	if len(password) < 8 {
		return "", errors.New("a password has at least 8 characters")
	}
	b, err := bcrypt.GenerateFromPassword([]byte(password), PasswordCost)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// TokenHashOf is the hash the configuration stores for a bearer token:
// "sha256:" and the hex SHA-256 of the token.
func TokenHashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NewToken returns a random bearer token and its hash (TokenHashOf).
func NewToken() (token, hash string) {
	token = "nrt_" + randomHex(32)
	return token, TokenHashOf(token)
}

// NewPassword returns a random password.
func NewPassword() string { return randomHex(16) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// checkPassword says whether password is the user's. An unknown user
// costs a bcrypt comparison too, so a wrong name answers as slowly as a
// wrong password.
func (a *authn) checkPassword(name, password string) (User, bool) {
	u, ok := a.users[name]
	if !ok || u.PasswordHash == "" {
		a.dummyOnce.Do(func() { a.dummy, _ = bcrypt.GenerateFromPassword([]byte(randomHex(8)), a.dummyCost) })
		_ = a.compare(a.dummy, []byte(password))
		return User{}, false
	}
	return u, a.compare([]byte(u.PasswordHash), []byte(password)) == nil
}

// checkToken finds the user whose token hash is the token's.
func (a *authn) checkToken(token string) (User, bool) {
	if token == "" {
		return User{}, false
	}
	want := TokenHashOf(token)
	var found User
	ok := false
	for _, u := range a.users {
		if u.TokenHash != "" && subtle.ConstantTimeCompare([]byte(strings.ToLower(normTokenHash(u.TokenHash))), []byte(want)) == 1 {
			found, ok = u, true
		}
	}
	return found, ok
}

// normTokenHash accepts a bare hex SHA-256 as well as "sha256:<hex>".
func normTokenHash(h string) string {
	if !strings.HasPrefix(h, "sha256:") {
		return "sha256:" + h
	}
	return h
}

// CheckUser reports what is wrong with a user's configuration.
func CheckUser(u User) error {
	switch {
	case u.Name == "":
		return errors.New("name is empty")
	case u.Role.rank() == 0:
		return fmt.Errorf("role %q must be viewer, gamemaster or operator", u.Role)
	case u.PasswordHash == "" && u.TokenHash == "":
		return errors.New("needs passwordHash or tokenHash (narratoria console hash-password)")
	}
	if u.PasswordHash != "" {
		if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
			return fmt.Errorf("passwordHash is not a bcrypt hash: %v", err)
		}
	}
	if u.TokenHash != "" {
		h := strings.TrimPrefix(u.TokenHash, "sha256:")
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			return errors.New("tokenHash must be sha256:<64 hex digits>")
		}
	}
	return nil
}

// authn holds the console's users and its signed-in sessions.
type authn struct {
	users map[string]User
	proxy *TrustedProxy
	ttl   time.Duration
	// dummy is the hash an unknown name is checked against, made at the
	// first such login (at dummyCost, what the users' hashes cost).
	dummy     []byte
	dummyOnce sync.Once
	dummyCost int
	// limit throttles password logins per account and per address.
	limit *throttle
	// compare checks a password against its hash: bcrypt's (tests count
	// the calls).
	compare func(hash, password []byte) error

	mu       sync.Mutex
	sessions map[string]session // by the SHA-256 of the cookie
}

func peerIP(remoteAddr string) string {
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return h
	}
	return remoteAddr
}

type session struct {
	id      Identity
	expires time.Time
}

// cookieName is the session cookie's name: narratoria_session, and the
// port the request names, since browsers keep cookies by host and not by
// port: two consoles on one host (narratoria up --tenants serves one per
// tenant) would otherwise sign each other out.
func cookieName(r *http.Request) string {
	if _, port, err := net.SplitHostPort(r.Host); err == nil && port != "" && strings.Trim(port, "0123456789") == "" {
		return "narratoria_session_" + port
	}
	return "narratoria_session"
}

func newAuthn(users []User, proxy *TrustedProxy, ttl time.Duration) (*authn, error) {
	if ttl <= 0 {
		ttl = 12 * time.Hour
	}
	a := &authn{users: map[string]User{}, proxy: proxy, ttl: ttl, sessions: map[string]session{}, limit: newThrottle(time.Now),
		compare: bcrypt.CompareHashAndPassword}
	for i, u := range users {
		if err := CheckUser(u); err != nil {
			return nil, fmt.Errorf("user %d (%s): %w", i, u.Name, err)
		}
		if _, dup := a.users[u.Name]; dup {
			return nil, fmt.Errorf("user %s is listed twice", u.Name)
		}
		a.users[u.Name] = u
	}
	// The hash an unknown name is checked against costs what the users'
	// own hashes cost, so a wrong name takes as long as a wrong password.
	cost := bcrypt.DefaultCost
	for _, u := range a.users {
		if c, err := bcrypt.Cost([]byte(u.PasswordHash)); err == nil {
			cost = c
			break
		}
	}
	a.dummyCost = cost
	return a, nil
}

func sessionKey(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return string(sum[:])
}

// start opens a session for id and returns its cookie value.
func (a *authn) start(id Identity) string {
	v := randomHex(32)
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, s := range a.sessions {
		if now.After(s.expires) {
			delete(a.sessions, k)
		}
	}
	a.sessions[sessionKey(v)] = session{id: id, expires: now.Add(a.ttl)}
	return v
}

func (a *authn) end(cookie string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, sessionKey(cookie))
}

// identify finds who a request comes from: the trusted proxy's headers
// (from its sources only), a bearer token, or a session cookie. A role
// that cannot be resolved is an error (403); nobody is ok=false (401).
func (a *authn) identify(r *http.Request) (Identity, bool, error) {
	if a.proxy.trusted(r.RemoteAddr) {
		if name := strings.TrimSpace(r.Header.Get(a.proxy.UserHeader)); name != "" {
			role := a.proxy.DefaultRole
			if rr, ok := a.proxy.Roles[name]; ok {
				role = rr
			}
			if a.proxy.RoleHeader != "" {
				if h := r.Header.Get(a.proxy.RoleHeader); h != "" {
					pr, err := ParseRole(h)
					if err != nil {
						return Identity{}, false, fmt.Errorf("the proxy's %s: %v", a.proxy.RoleHeader, err)
					}
					role = pr
				}
			}
			if role == "" {
				return Identity{}, false, fmt.Errorf("the proxy signed in %s, who has no console role", name)
			}
			return Identity{Name: name, Role: role, Via: "proxy"}, true, nil
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return Identity{}, false, nil
		}
		u, ok := a.checkToken(strings.TrimSpace(tok))
		if !ok {
			return Identity{}, false, nil
		}
		return Identity{Name: u.Name, Role: u.Role, Via: "token"}, true, nil
	}
	c, err := r.Cookie(cookieName(r))
	if err != nil || c.Value == "" {
		return Identity{}, false, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[sessionKey(c.Value)]
	if !ok || time.Now().After(s.expires) {
		return Identity{}, false, nil
	}
	// A user removed or changed since is out (static users only).
	if s.id.Via == "password" {
		if u, ok := a.users[s.id.Name]; !ok || u.Role != s.id.Role {
			return Identity{}, false, nil
		}
	}
	return s.id, true, nil
}

// guarded is what a state-changing route needs: the role, and the name
// of the action in the audit trail.
type guarded struct {
	action string
	need   Role
}

// guards are the state-changing routes, by pattern. A state-changing
// route missing here (or no route at all) needs the operator role and is
// audited as action "other" with its method and path.
var guards = map[string]guarded{
	"POST /api/plans/{plan}/cancel":               {"cancel", RoleGameMaster},
	"POST /api/plans/{plan}/tools/{tool}/approve": {"approve", RoleGameMaster},
	"POST /api/plans/{plan}/tools/{tool}/deny":    {"deny", RoleGameMaster},
	"POST /api/prompt":                            {"prompt", RoleGameMaster},
	"POST /api/plans/{plan}/rerun":                {"rerun", RoleGameMaster},
	"POST /api/plans/{plan}/tools/{tool}/rerun":   {"rerun", RoleGameMaster},
	"POST /api/sessions/{session}/reset":          {"reset", RoleOperator},
}

// open are the API routes that need no login.
var open = map[string]bool{"POST /api/login": true, "POST /api/logout": true}

// authorize is the auth middleware in front of the API: it refuses an
// /api/ request without a login (401), a state change the user's role may
// not make (403, naming the role needed), and writes every state change
// to the audit trail with its outcome. The page itself is served to
// anyone (it shows the login form).
func (cs *Console) authorize(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/") {
			mux.ServeHTTP(w, r)
			return
		}
		_, pattern := mux.Handler(r)
		if open[pattern] {
			mux.ServeHTTP(w, r)
			return
		}
		id, ok, err := cs.auth.identify(r)
		if err != nil {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
			return
		}
		if !ok {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "log in first (POST /api/login with name and password, or Authorization: Bearer <token>)"})
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), identityKey{}, id))
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			mux.ServeHTTP(w, r)
			return
		}
		g, known := guards[pattern]
		if !known {
			g = guarded{action: "other", need: RoleOperator}
		}
		entry := AuditEntry{User: id.Name, Role: id.Role, Via: id.Via, Action: g.action, Method: r.Method, Path: r.URL.Path, Remote: cs.auth.proxy.clientAddr(r)}
		if !id.Role.Allows(g.need) {
			msg := fmt.Sprintf("%s needs the %s role", g.action, g.need.title())
			if g.need != RoleOperator {
				msg += " or operator"
			}
			msg += fmt.Sprintf("; %s is a %s", id.Name, id.Role.title())
			writeJSON(w, http.StatusForbidden, map[string]string{"error": msg, "need": string(g.need)})
			entry.Outcome, entry.Status, entry.Error = "refused", http.StatusForbidden, msg
			cs.audit(r.Context(), entry)
			return
		}
		rec := &recorder{ResponseWriter: w}
		body := peekBody(r)
		mux.ServeHTTP(rec, r)
		entry.Plan, entry.Tool, entry.Session = r.PathValue("plan"), r.PathValue("tool"), r.PathValue("session")
		entry.Reason = body.Reason
		if entry.Session == "" {
			entry.Session = body.SessionID
		}
		entry.Status = rec.status()
		entry.Outcome = "ok"
		if entry.Status >= 400 {
			entry.Outcome, entry.Error = "error", rec.errorText()
		}
		cs.audit(context.WithoutCancel(r.Context()), entry)
	})
}

// recorder notes a response's status and the start of an error body.
type recorder struct {
	http.ResponseWriter
	code int
	head []byte
}

func (rc *recorder) WriteHeader(code int) {
	if rc.code == 0 {
		rc.code = code
	}
	rc.ResponseWriter.WriteHeader(code)
}

func (rc *recorder) Write(b []byte) (int, error) {
	if rc.code == 0 {
		rc.code = http.StatusOK
	}
	if rc.code >= 400 && len(rc.head) < 1024 {
		rc.head = append(rc.head, b[:min(len(b), 1024-len(rc.head))]...)
	}
	return rc.ResponseWriter.Write(b)
}

// Flush lets a recorded response stream.
func (rc *recorder) Flush() {
	if f, ok := rc.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (rc *recorder) status() int {
	if rc.code == 0 {
		return http.StatusOK
	}
	return rc.code
}

func (rc *recorder) errorText() string {
	var e struct {
		Error string `json:"error"`
	}
	if jsonUnmarshal(rc.head, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(rc.head))
}
