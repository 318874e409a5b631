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

// AuditEntry is one line of the console's audit trail (stream
// NARRATORIA_AUDIT, subject <prefix>.audit.<action>).
type AuditEntry struct {
	// Seq is the entry's sequence in the stream (set when read).
	Seq  uint64    `json:"seq,omitempty"`
	Time time.Time `json:"time"`
	// Tenant is the tenant whose console it was ("" for the service's).
	Tenant string `json:"tenant,omitempty"`
	// User is the signed-in user (for a failed login, the name tried).
	User string `json:"user"`
	Role Role   `json:"role,omitempty"`
	// Via is how the user signed in: password, token or proxy.
	Via string `json:"via,omitempty"`
	// Action is login, logout, approve, deny, cancel, prompt or reset.
	Action string `json:"action"`
	// Method and Path are the request's (for login and logout: empty).
	Method  string `json:"method,omitempty"`
	Path    string `json:"path,omitempty"`
	Plan    string `json:"plan,omitempty"`
	Tool    string `json:"tool,omitempty"`
	Session string `json:"session,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Outcome is ok, error (the action failed) or refused (the role may
	// not, or the login was wrong).
	Outcome string `json:"outcome"`
	Status  int    `json:"status,omitempty"`
	Error   string `json:"error,omitempty"`
	// Remote is the peer address of the request.
	Remote string `json:"remote,omitempty"`
}

// auditScanMax bounds the entries one page of /api/audit looks at.
const auditScanMax = 5000

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

// audit writes an entry to the audit trail; a failure is logged (the
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
	subj := cs.subj.Root() + ".audit."
	if e.Tenant != "" {
		subj += e.Tenant + "."
	}
	if _, err := cs.auditJS.Publish(ctx, subj+e.Action, b); err != nil {
		cs.log.Error("console: audit entry not stored", slog.String("action", e.Action), slog.String("user", e.User), slog.String("outcome", e.Outcome), slog.Any("error", err))
		return
	}
	cs.log.Info("console: audit", slog.String("action", e.Action), slog.String("user", e.User), slog.String("outcome", e.Outcome),
		slog.String("plan", e.Plan), slog.String("session", e.Session))
}

// listAudit answers the newest audit entries, newest first, read from the
// stream: ?limit= (default 50, at most 200) entries older than ?before=
// (a sequence; default the newest). next is the before of the next page
// (0 when there is none). A tenant's console lists its tenant's entries
// only, looking at most auditScanMax entries a page.
func (cs *Console) listAudit(w http.ResponseWriter, r *http.Request) {
	limit := 50
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fail(w, errors.Join(errBadRequest, errors.New("limit must be a positive number")))
			return
		}
		limit = min(n, 200)
	}
	var before uint64
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fail(w, errors.Join(errBadRequest, errors.New("before must be a sequence number")))
			return
		}
		before = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if cs.auditJS == nil {
		writeJSON(w, http.StatusOK, map[string]any{"entries": []AuditEntry{}, "next": 0})
		return
	}
	st, err := cs.auditJS.Stream(ctx, messages.StreamAudit)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		writeJSON(w, http.StatusOK, map[string]any{"entries": []AuditEntry{}, "next": 0})
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	info, err := st.Info(ctx)
	if err != nil {
		fail(w, err)
		return
	}
	seq := info.State.LastSeq
	if before != 0 && before-1 < seq {
		seq = before - 1
	}
	out := []AuditEntry{}
	scanned := 0
	for ; seq >= info.State.FirstSeq && seq > 0 && len(out) < limit && scanned < auditScanMax; seq-- {
		scanned++
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			fail(w, err)
			return
		}
		var e AuditEntry
		if json.Unmarshal(m.Data, &e) != nil || (cs.auditTenant != "" && e.Tenant != cs.auditTenant) {
			continue
		}
		e.Seq = m.Sequence
		out = append(out, e)
	}
	next := uint64(0)
	if seq >= info.State.FirstSeq && seq > 0 {
		next = seq + 1 // the next page starts below the last one looked at
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out, "next": next})
}

// login checks a name and password and opens a session: an HttpOnly,
// SameSite=Strict cookie. Success and failure are audited.
func (cs *Console) login(w http.ResponseWriter, r *http.Request) {
	var rq struct {
		Name     string `json:"name"`
		Password string `json:"password"`
	}
	if err := body(r, &rq); err != nil {
		fail(w, err)
		return
	}
	entry := AuditEntry{User: rq.Name, Action: "login", Via: "password", Remote: r.RemoteAddr}
	if len(entry.User) > 100 {
		entry.User = entry.User[:100]
	}
	if wait := cs.auth.throttled(r.RemoteAddr); wait > 0 {
		msg := fmt.Sprintf("too many failed logins from this address; try again in %s", wait.Round(time.Second))
		entry.Outcome, entry.Status, entry.Error = "refused", http.StatusTooManyRequests, msg
		cs.audit(context.WithoutCancel(r.Context()), entry)
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": msg})
		return
	}
	u, ok := cs.auth.checkPassword(rq.Name, rq.Password)
	if !ok {
		cs.auth.failed(r.RemoteAddr)
		entry.Outcome, entry.Status, entry.Error = "refused", http.StatusUnauthorized, "wrong name or password"
		cs.audit(context.WithoutCancel(r.Context()), entry)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "wrong name or password"})
		return
	}
	id := Identity{Name: u.Name, Role: u.Role, Via: "password"}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: cs.auth.start(id), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(cs.auth.ttl / time.Second)})
	entry.Role, entry.Outcome, entry.Status = u.Role, "ok", http.StatusOK
	cs.audit(context.WithoutCancel(r.Context()), entry)
	writeJSON(w, http.StatusOK, id)
}

// logout ends the request's session, if any.
func (cs *Console) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName(r)); err == nil && c.Value != "" {
		if id, ok, _ := cs.auth.identify(r); ok {
			cs.audit(context.WithoutCancel(r.Context()), AuditEntry{User: id.Name, Role: id.Role, Via: id.Via, Action: "logout", Outcome: "ok", Status: http.StatusOK, Remote: r.RemoteAddr})
		}
		cs.auth.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// me answers who the request comes from.
func (cs *Console) me(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, identityOf(r))
}
