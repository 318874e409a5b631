package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// AuditEntry is one line of the console's audit trail: an action on
// stream NARRATORIA_AUDIT (subject <prefix>.audit.<action>, a tenant's
// console <prefix>.audit.<tenant>.<action>), or the refused logins of one
// source address in one minute on NARRATORIA_AUDIT_LOGINS
// (<prefix>.logins.refused, a tenant's <prefix>.logins.<tenant>.refused).
type AuditEntry struct {
	// Seq is the entry's sequence in the stream (set when read).
	Seq  uint64    `json:"seq,omitempty"`
	Time time.Time `json:"time"`
	// Until ends the minute of an entry of refused logins (Time starts it).
	Until time.Time `json:"until,omitzero"`
	// Tenant is the tenant whose console it was ("" for the service's).
	Tenant string `json:"tenant,omitempty"`
	// User is the signed-in user (for refused logins, the first name
	// tried).
	User string `json:"user"`
	// Users are the names refused logins tried (the first few).
	Users []string `json:"users,omitempty"`
	Role  Role     `json:"role,omitempty"`
	// Via is how the user signed in: password, token or proxy.
	Via string `json:"via,omitempty"`
	// Action is login, logout, approve, deny, cancel, prompt, rerun, reset
	// or other.
	Action string `json:"action"`
	// Method and Path are the request's (for login and logout: empty).
	Method  string `json:"method,omitempty"`
	Path    string `json:"path,omitempty"`
	Plan    string `json:"plan,omitempty"`
	Tool    string `json:"tool,omitempty"`
	Session string `json:"session,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Outcome is ok, error (the action failed) or refused (the role may
	// not, or the login was wrong or throttled).
	Outcome string `json:"outcome"`
	Status  int    `json:"status,omitempty"`
	Error   string `json:"error,omitempty"`
	// Remote is the client's address: the request's peer, or the address
	// the trusted proxy forwarded. For refused logins, the source they are
	// counted under (an IPv6 address by its /64), or "other addresses".
	Remote string `json:"remote,omitempty"`
	// Count is how many logins an entry of refused logins stands for, of
	// which Throttled were refused unchecked (too many failures).
	Count     int `json:"count,omitempty"`
	Throttled int `json:"throttled,omitempty"`
	// Addresses is how many addresses the "other addresses" entry counts.
	Addresses int `json:"addresses,omitempty"`
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// peeked is what the audit trail takes from a request body.
type peeked struct {
	Reason    string `json:"reason"`
	SessionID string `json:"sessionId"`
}

// peekBody reads the start of a request body for the audit trail and puts
// it back for the handler.
func peekBody(r *http.Request) peeked {
	var p peeked
	if r.Body == nil {
		return p
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
	if err == nil {
		_ = json.Unmarshal(b, &p)
	}
	if len(p.Reason) > 500 {
		p.Reason = p.Reason[:500]
	}
	return p
}

// audit writes an action to the audit trail; a failure is logged (the
// action it records has happened or not regardless).
func (cs *Console) audit(ctx context.Context, e AuditEntry) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Tenant = cs.auditTenant
	if cs.auditJS == nil {
		cs.log.Info("console: audit (not kept: no JetStream)", slog.String("action", e.Action), slog.String("user", e.User), slog.String("outcome", e.Outcome))
		return
	}
	b, _ := json.Marshal(e)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cs.auditJS.Publish(ctx, cs.auditSubject("audit", e.Action), b); err != nil {
		cs.log.Error("console: audit entry not stored", slog.String("action", e.Action), slog.String("user", e.User), slog.String("outcome", e.Outcome), slog.Any("error", err))
		return
	}
	cs.log.Info("console: audit", slog.String("action", e.Action), slog.String("user", e.User), slog.String("outcome", e.Outcome),
		slog.String("plan", e.Plan), slog.String("session", e.Session))
}

// auditSubject is where this console writes an entry: <prefix>.<kind>.
// [<tenant>.]<last>.
func (cs *Console) auditSubject(kind, last string) string {
	subj := cs.subj.Root() + "." + kind + "."
	if cs.auditTenant != "" {
		subj += cs.auditTenant + "."
	}
	return subj + last
}

// auditFilter is what this console lists of a kind: its tenant's entries,
// or every entry for the service's console.
func (cs *Console) auditFilter(kind string) string {
	if cs.auditTenant == "" {
		return cs.subj.Root() + "." + kind + ".>"
	}
	return cs.subj.Root() + "." + kind + "." + cs.auditTenant + ".*"
}

// writeLogins stores the entries of a minute's refused logins
// (loginTally) on NARRATORIA_AUDIT_LOGINS, and logs one line for them.
func (cs *Console) writeLogins(entries []AuditEntry) {
	total, stored := 0, 0
	for _, e := range entries {
		total += e.Count
		e.Tenant = cs.auditTenant
		if cs.auditJS == nil {
			continue
		}
		b, _ := json.Marshal(e)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cs.auditJS.Publish(ctx, cs.auditSubject("logins", "refused"), b)
		cancel()
		if err != nil {
			cs.m.loginEntries.WithLabelValues("failed").Inc()
			cs.log.Error("console: audit entry of refused logins not stored", slog.String("remote", e.Remote), slog.Int("count", e.Count), slog.Any("error", err))
			continue
		}
		cs.m.loginEntries.WithLabelValues("stored").Inc()
		stored++
	}
	cs.log.Warn("console: refused logins audited", slog.Time("minute", entries[0].Time), slog.Int("refused", total),
		slog.Int("sources", len(entries)), slog.Int("entriesStored", stored))
}

// auditKinds are what /api/audit?kind= lists: the actions, or the
// refused logins.
var auditKinds = map[string]struct{ stream, subject string }{
	"":       {messages.StreamAudit, "audit"},
	"logins": {messages.StreamAuditLogins, "logins"},
}

// listAudit answers the newest audit entries, newest first, read from the
// stream: ?limit= (default 50, at most 200) entries older than ?before=
// (a sequence; default the newest); ?kind=logins lists the refused logins
// (one entry per source address and minute) instead of the actions. next
// is the before of the next page (0 when there is none). A tenant's
// console lists its tenant's entries only (pageBySubject), however many
// other tenants wrote.
func (cs *Console) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind, ok := auditKinds[q.Get("kind")]
	if !ok {
		fail(w, errors.Join(errBadRequest, errors.New("kind must be empty (actions) or logins")))
		return
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fail(w, errors.Join(errBadRequest, errors.New("limit must be a positive number")))
			return
		}
		limit = min(n, 200)
	}
	var before uint64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fail(w, errors.Join(errBadRequest, errors.New("before must be a sequence number")))
			return
		}
		before = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	empty := map[string]any{"entries": []AuditEntry{}, "next": 0}
	if cs.auditJS == nil {
		writeJSON(w, http.StatusOK, empty)
		return
	}
	st, err := cs.auditJS.Stream(ctx, kind.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		writeJSON(w, http.StatusOK, empty)
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	msgs, next, err := pageBySubject(ctx, st, cs.auditFilter(kind.subject), before, limit)
	if err != nil {
		fail(w, err)
		return
	}
	out := []AuditEntry{}
	for _, m := range msgs {
		var e AuditEntry
		if json.Unmarshal(m.Data, &e) != nil || (cs.auditTenant != "" && e.Tenant != cs.auditTenant) {
			continue
		}
		e.Seq = m.Sequence
		out = append(out, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out, "next": next})
}

// login checks a name and password and opens a session: an HttpOnly,
// SameSite=Strict cookie, Secure over HTTPS (or behind the trusted proxy
// when it says https). The attempt is reserved with the throttle before
// the password is checked (throttle.go): one throttled is refused at no
// bcrypt cost. A success is an action of the audit trail; a refusal is
// counted in the minute's entry of its source address (logins.go).
func (cs *Console) login(w http.ResponseWriter, r *http.Request) {
	var rq struct {
		Name     string `json:"name"`
		Password string `json:"password"`
	}
	if err := body(r, &rq); err != nil {
		fail(w, err)
		return
	}
	user := rq.Name
	if len(user) > 100 {
		user = user[:100]
	}
	client := cs.auth.proxy.clientAddr(r)
	release, wait, scope := cs.auth.limit.reserve(rq.Name, client)
	if wait > 0 {
		cs.m.throttled.WithLabelValues(scope).Inc()
		cs.m.refusedLogins.WithLabelValues("throttled").Inc()
		cs.logins.note(client, user, true)
		what := "for this account"
		if scope == scopeAddress {
			what = "from this address"
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": fmt.Sprintf("too many failed logins %s; try again in %s", what, wait.Round(time.Second))})
		return
	}
	cs.m.passwordChecks.Inc()
	u, ok := cs.auth.checkPassword(rq.Name, rq.Password)
	release(ok)
	if !ok {
		cs.m.refusedLogins.WithLabelValues("refused").Inc()
		cs.logins.note(client, user, false)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "wrong name or password"})
		return
	}
	id := Identity{Name: u.Name, Role: u.Role, Via: "password"}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: cs.auth.start(id), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: cs.auth.proxy.https(r), MaxAge: int(cs.auth.ttl / time.Second)})
	cs.audit(context.WithoutCancel(r.Context()), AuditEntry{User: u.Name, Role: u.Role, Action: "login", Via: "password", Remote: client,
		Outcome: "ok", Status: http.StatusOK})
	writeJSON(w, http.StatusOK, id)
}

// logout ends the request's session, if any.
func (cs *Console) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName(r)); err == nil && c.Value != "" {
		if id, ok, _ := cs.auth.identify(r); ok {
			cs.audit(context.WithoutCancel(r.Context()), AuditEntry{User: id.Name, Role: id.Role, Via: id.Via, Action: "logout", Outcome: "ok", Status: http.StatusOK,
				Remote: cs.auth.proxy.clientAddr(r)})
		}
		cs.auth.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: cs.auth.proxy.https(r), MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// me answers who the request comes from, and whose console this is: a
// tenant's (its name), or the operator's across every tenant.
func (cs *Console) me(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Identity
		Tenant        string `json:"tenant,omitempty"`
		AcrossTenants bool   `json:"acrossTenants,omitempty"`
	}{identityOf(r), cs.auditTenant, cs.subj.Tenants})
}
