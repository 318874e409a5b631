// Package console is Narratoria's web console: a small HTTP server that
// serves an embedded single-page front end (ui/, no build step) and a JSON
// API over NATS — plans in flight and their status, results, skills and
// health, prompts, approvals, cancels and session resets through
// pkg/client — with live updates as server-sent events fed by core NATS
// subscriptions. It holds no state but its users' login sessions: every
// page load and every event comes from NATS. Every API request needs a
// login with a role (viewer, game master, operator), and every state
// change is written to the audit stream (auth.go, audit.go).
package console

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/narratoria/runtime/internal/history"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

//go:embed ui
var ui embed.FS

// Options configure a console.
type Options struct {
	// Prefix is the deployment's subject prefix. Default "narratoria".
	Prefix string
	// Logger receives the console's logs. Default: discard.
	Logger *slog.Logger
	// WorkerTTL is how recent a worker's heartbeat must be to count as
	// live. Default 10 s.
	WorkerTTL time.Duration
	// DecisionWait is how long an approval or denial waits for a
	// scheduler to take it before it is answered as not stored (none
	// runs). Default 5 s: a person waits.
	DecisionWait time.Duration
	// AllowedHosts are the host names (without port) the console answers
	// to besides "localhost" and IP addresses, e.g. the name a reverse
	// proxy serves it under. A request whose Host header names anything
	// else is refused: a DNS name an attacker controls, pointed at the
	// console's address (DNS rebinding), does not reach it.
	AllowedHosts []string
	// Users are the console's logins. Every /api/ request needs one of
	// them (or the trusted proxy's word); with neither, nobody gets in.
	Users []User
	// TrustedProxy, if set, signs in users a single sign-on proxy names.
	TrustedProxy *TrustedProxy
	// SessionTTL is how long a login lasts. Default 12 h.
	SessionTTL time.Duration
	// AuditJS, if set, is where the audit trail is written and read instead
	// of the console's own connection: a tenant's console, whose account
	// has no JetStream, audits through the service's.
	AuditJS jetstream.JetStream
	// AuditTenant names the tenant whose console this is: its entries go
	// on <prefix>.audit.<tenant>.<action> (refused logins on
	// <prefix>.logins.<tenant>.refused), and it lists only those.
	AuditTenant string
	// AssetMaxSize bounds an asset object the console serves: a larger
	// one is refused before a byte is sent. Default
	// messages.AssetMaxSizeDefault (16 MiB), as the workers store them.
	AssetMaxSize int64
	// Registerer receives the console's metrics, labelled with
	// AuditTenant. Default: none.
	Registerer prometheus.Registerer
	// Tenants makes the console the operator's across every tenant of a
	// multi-tenant deployment, on the service's account: sessions are
	// <tenant>.<session> and plan control goes across tenants
	// (messages.AllTenants). Default false.
	Tenants bool
}

// Console serves the web console over one NATS connection.
type Console struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	c    *client.Client
	subj messages.Subjects
	log  *slog.Logger
	ttl  time.Duration
	// decisionWait bounds an approval's wait for a scheduler (Options.DecisionWait).
	decisionWait time.Duration
	// hosts are the allowed host names, lower-cased.
	hosts map[string]bool
	// hist indexes finished plans for the history search; nil on an
	// account without JetStream (a tenant's), whose console asks a
	// scheduler's index instead (client.History).
	hist *history.Index
	// noJS says the console's account has no JetStream (a tenant's): the
	// registry and history come through plan control.
	noJS bool
	auth *authn
	// auditJS writes and reads the audit trail (nil: not kept, an account
	// without JetStream); auditTenant as Options.AuditTenant.
	auditJS     jetstream.JetStream
	auditTenant string
	// logins aggregates refused logins for the audit trail.
	logins *loginTally
	m      *metrics
}

// New builds a console on an open connection (it does not own it).
func New(nc *nats.Conn, o Options) (*Console, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.WorkerTTL <= 0 {
		o.WorkerTTL = 10 * time.Second
	}
	if o.DecisionWait <= 0 {
		o.DecisionWait = 5 * time.Second
	}
	o.AssetMaxSize = cmp.Or(o.AssetMaxSize, messages.AssetMaxSizeDefault)
	subj := messages.Subjects{Prefix: o.Prefix}
	if o.Tenants {
		subj.Tenants, subj.Tenant = true, messages.AllTenants
	}
	c, err := client.New(nc, client.WithSubjects(subj), client.WithAssetMaxSize(o.AssetMaxSize), client.WithDirectAssetReads())
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	hosts := map[string]bool{"localhost": true}
	for _, h := range o.AllowedHosts {
		hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	auth, err := newAuthn(o.Users, o.TrustedProxy, o.SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	cs := &Console{nc: nc, js: js, c: c, subj: c.Subjects(), log: o.Logger, ttl: o.WorkerTTL, decisionWait: o.DecisionWait, hosts: hosts, auth: auth,
		auditJS: o.AuditJS, auditTenant: o.AuditTenant, m: newMetrics(o.Registerer, o.AuditTenant)}
	cs.logins = newLoginTally(time.Now, cs.writeLogins)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		// A tenant's account: the registry and the history come through
		// plan control, answered for the tenant only.
		cs.noJS = true
	} else {
		cs.hist = history.New(js, cs.subj, o.Logger)
	}
	if cs.auditJS == nil {
		cs.auditJS = js
		if cs.noJS {
			o.Logger.Warn("console: this account has no JetStream: no audit trail is kept (a tenant's console audits through the service's connection, as narratoria up --tenants does)")
			cs.auditJS = nil
		}
	}
	return cs, nil
}

// Close stops what the console reads in the background (the history
// index) and writes the refused logins counted so far. The handler keeps
// answering, without history.
func (cs *Console) Close() {
	if cs.hist != nil {
		cs.hist.Stop()
	}
	cs.logins.close()
}

// Handler is the console's HTTP handler: the page at /, the API under /api/.
// A state-changing request (POST) that a browser marks as cross-origin
// (Sec-Fetch-Site, or an Origin whose host is not the request's Host) is
// refused with 403: a page on another site cannot cancel, approve, deny,
// prompt or reset through a user's browser (net/http's
// CrossOriginProtection). A request for a host the console does not
// answer to (Options.AllowedHosts) gets 421 whatever its method. Every
// /api/ request but login and logout needs a login (401 without), and a
// state change the user's role may not make gets 403 (authorize).
//
// Every response carries the console's security headers (secureHeaders):
// a Content Security Policy, no framing, no sniffing, no referrer.
func (cs *Console) Handler() http.Handler {
	return secureHeaders(cs.checkHost(http.NewCrossOriginProtection().Handler(cs.authorize(cs.routes()))))
}

// checkHost refuses a request whose Host header is neither an IP address,
// "localhost", nor an allowed name. A page from a rebinding DNS name sends
// that name; an IP address or localhost cannot be rebound.
func (cs *Console) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
		if net.ParseIP(host) == nil && !cs.hosts[host] {
			cs.log.Warn("console: request for a host it does not answer to refused", slog.String("host", r.Host), slog.String("path", r.URL.Path))
			http.Error(w, fmt.Sprintf("this console does not answer to host %q; an operator adds its name with --allow-host", r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (cs *Console) routes() *http.ServeMux {
	mux := http.NewServeMux()
	static, _ := fs.Sub(ui, "ui")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/plans", cs.listPlans)
	mux.HandleFunc("GET /api/plans/{plan}", cs.planStatus)
	mux.HandleFunc("GET /api/results/{plan}", cs.result)
	mux.HandleFunc("POST /api/plans/{plan}/cancel", cs.cancel)
	mux.HandleFunc("POST /api/plans/{plan}/tools/{tool}/approve", cs.decide(true))
	mux.HandleFunc("POST /api/plans/{plan}/tools/{tool}/deny", cs.decide(false))
	mux.HandleFunc("POST /api/prompt", cs.prompt)
	mux.HandleFunc("POST /api/sessions/{session}/reset", cs.reset)
	mux.HandleFunc("GET /api/skills", cs.skills)
	mux.HandleFunc("GET /api/assets/{object}", cs.asset)
	mux.HandleFunc("GET /api/history", cs.searchHistory)
	mux.HandleFunc("GET /api/results/{plan}/inputs", cs.inputs)
	mux.HandleFunc("POST /api/plans/{plan}/rerun", cs.rerun)
	mux.HandleFunc("POST /api/plans/{plan}/tools/{tool}/rerun", cs.rerun)
	mux.HandleFunc("GET /api/sessions/{session}/narrations", cs.sessionNarrations)
	mux.HandleFunc("GET /api/events", cs.events)
	mux.HandleFunc("POST /api/login", cs.login)
	mux.HandleFunc("POST /api/logout", cs.logout)
	mux.HandleFunc("GET /api/me", cs.me)
	mux.HandleFunc("GET /api/audit", cs.listAudit)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers an error: 404 for what is not there, 400 for bad input,
// 503 when nothing serves the request, 502 otherwise.
func fail(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	var se *client.ServiceError
	switch {
	case errors.Is(err, client.ErrNoResponders) || errors.Is(err, errUnavailable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, client.ErrNotInFlight) && !errors.Is(err, client.ErrPlanFinished):
		code = http.StatusNotFound // an unknown plan
	case errors.As(err, &se):
		code = http.StatusConflict
	case errors.Is(err, messages.ErrInvalidToken) || errors.Is(err, messages.ErrInvalidPlanID) || errors.Is(err, errBadRequest):
		code = http.StatusBadRequest
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

var errBadRequest = errors.New("bad request")

// errUnavailable marks what the console cannot read now (503).
var errUnavailable = errors.New("unavailable")

func (cs *Console) listPlans(w http.ResponseWriter, r *http.Request) {
	plans, err := cs.c.ListPlans(r.Context(), r.URL.Query().Get("session"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"plans": plans})
}

func (cs *Console) planStatus(w http.ResponseWriter, r *http.Request) {
	st, err := cs.c.PlanStatus(r.Context(), r.PathValue("plan"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// result answers the stored Execution Result of a finished plan
// (client.Result: a direct get, which a tenant's console reaches through
// its account's import of that API, for its own results only).
func (cs *Console) result(w http.ResponseWriter, r *http.Request) {
	plan := r.PathValue("plan")
	if err := messages.CheckPlanID(plan); err != nil {
		fail(w, fmt.Errorf("%w: %v", errBadRequest, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	res, err := cs.c.Result(ctx, plan)
	if errors.Is(err, client.ErrNoResult) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no result for plan " + plan + " (yet)"})
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// body decodes a small JSON request body into v (an empty body is {}),
// with exact keys.
func body(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: body is not JSON: %v", errBadRequest, err)
	}
	// Keys are exact and unique (§11): {"reason":"a","Reason":"b"} is
	// refused, not read as whichever encoding/json takes.
	if err := codec.CheckKeys(b, v); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return nil
}

type reason struct {
	Reason string `json:"reason"`
	// By is ignored: the signed-in user is who acts (Console.by).
	By string `json:"by"`
}

// by is who the scheduler records for an action: the signed-in user,
// whatever the body says.
func (cs *Console) by(r *http.Request) string {
	if id := identityOf(r); id.Name != "" {
		return id.Name
	}
	return "console"
}

func (cs *Console) cancel(w http.ResponseWriter, r *http.Request) {
	var rq reason
	if err := body(r, &rq); err != nil {
		fail(w, err)
		return
	}
	if err := cs.c.Cancel(r.Context(), r.PathValue("plan"), cs.by(r), rq.Reason); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (cs *Console) decide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var rq reason
		if err := body(r, &rq); err != nil {
			fail(w, err)
			return
		}
		do := cs.c.Deny
		if approve {
			do = cs.c.Approve
		}
		// A person waits: a decision no scheduler takes within
		// DecisionWait (none runs) is answered as not stored.
		ctx, cancel := context.WithTimeout(r.Context(), cs.decisionWait)
		defer cancel()
		if err := do(ctx, r.PathValue("plan"), r.PathValue("tool"), cs.by(r), rq.Reason); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	}
}

// prompt submits a prompt durably and answers at once; the narration comes
// on the event stream.
func (cs *Console) prompt(w http.ResponseWriter, r *http.Request) {
	var p messages.Prompt
	if err := body(r, &p); err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	id, err := cs.c.Submit(ctx, p)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %v", errBadRequest, err)
		}
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"promptId": id})
}

func (cs *Console) reset(w http.ResponseWriter, r *http.Request) {
	if _, err := cs.c.ResetSession(r.Context(), r.PathValue("session"), false); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// skillView is one skill of /api/skills.
type skillView struct {
	Name        string            `json:"name"`
	Version     string            `json:"version"`
	Description string            `json:"description"`
	Scripts     []scriptView      `json:"scripts"`
	Workers     []workerView      `json:"workers"`
	Health      map[string]string `json:"health"`
	// Dispatch is the skill's fair dispatch, summed over the schedulers
	// (absent when none answered: a tenant's console, or none running).
	Dispatch *dispatchView `json:"dispatch,omitempty"`
}

// dispatchView is a skill's jobs admitted to the work queue and held back
// by fair dispatch (§12), in all and by tenant.
type dispatchView struct {
	Admitted int                     `json:"admitted"`
	Waiting  int                     `json:"waiting"`
	Tenants  []scheduler.TenantQueue `json:"tenants"`
}

// dispatchBySkill sums the schedulers' fair dispatch by skill: counts
// add up, a tenant's wait percentiles are the largest any scheduler saw.
func dispatchBySkill(ss []scheduler.Status) map[string]*dispatchView {
	out := map[string]*dispatchView{}
	for _, st := range ss {
		for _, q := range st.Queues {
			d := out[q.Skill]
			if d == nil {
				d = &dispatchView{Tenants: []scheduler.TenantQueue{}}
				out[q.Skill] = d
			}
			d.Admitted += q.InFlight
			d.Waiting += q.Waiting
			for _, t := range q.Tenants {
				i := slices.IndexFunc(d.Tenants, func(x scheduler.TenantQueue) bool { return x.Tenant == t.Tenant })
				if i < 0 {
					d.Tenants = append(d.Tenants, t)
					continue
				}
				x := &d.Tenants[i]
				x.InFlight += t.InFlight
				x.Waiting += t.Waiting
				x.WaitP50Ms, x.WaitP99Ms = max(x.WaitP50Ms, t.WaitP50Ms), max(x.WaitP99Ms, t.WaitP99Ms)
			}
		}
	}
	for _, d := range out {
		slices.SortFunc(d.Tenants, func(a, b scheduler.TenantQueue) int { return strings.Compare(a.Tenant, b.Tenant) })
	}
	return out
}

type scriptView struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type workerView struct {
	ID          string    `json:"id"`
	Host        string    `json:"host,omitempty"`
	Concurrency int       `json:"concurrency"`
	Running     int       `json:"running"`
	LastSeen    time.Time `json:"lastSeen"`
}

// skills lists the registry with live workers, and each skill's health in
// the session asked for: read from the buckets where the console's
// account reaches them, else (a tenant's console) from a scheduler's
// mirror of the registry, through the tenant's import of plan control
// (client.Skills), with the tenant's own health.
func (cs *Console) skills(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	session := r.URL.Query().Get("session")
	if session != "" && cs.subj.CheckSession(session) != nil {
		fail(w, fmt.Errorf("%w: %v", errBadRequest, cs.subj.CheckSession(session)))
		return
	}
	if cs.noJS {
		cs.skillsViaControl(w, r, session)
		return
	}
	kv, err := cs.js.KeyValue(ctx, messages.BucketSkills)
	if err != nil {
		fail(w, err)
		return
	}
	var healthKV jetstream.KeyValue
	if session != "" {
		healthKV, _ = cs.js.KeyValue(ctx, messages.BucketHealth)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		fail(w, err)
		return
	}
	out := []skillView{}
	now := time.Now()
	dispatch := dispatchBySkill(scheduler.Statuses(ctx, cs.nc, 0))
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var re messages.RegistryEntry
		if json.Unmarshal(e.Value(), &re) != nil {
			continue
		}
		v := skillView{Name: re.Name, Version: re.Version, Description: re.Description, Scripts: []scriptView{}, Workers: []workerView{},
			Health: map[string]string{}, Dispatch: dispatch[re.Name]}
		for _, s := range re.Scripts {
			v.Scripts = append(v.Scripts, scriptView{Name: s.Name, Description: s.Description})
		}
		for _, wi := range re.LiveWorkers(now, cs.ttl) {
			v.Workers = append(v.Workers, workerView{ID: wi.ID, Host: wi.Host, Concurrency: wi.Concurrency, Running: wi.Running, LastSeen: wi.LastSeen})
		}
		if healthKV != nil {
			v.Health[session] = "healthy"
			if he, err := healthKV.Get(ctx, session+"."+re.Name); err == nil {
				var st struct {
					State string `json:"state"`
				}
				if json.Unmarshal(he.Value(), &st) == nil && st.State != "" {
					v.Health[session] = st.State
				}
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b skillView) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, map[string]any{"skills": out})
}

// skillsViaControl answers /api/skills from a scheduler (client.Skills).
func (cs *Console) skillsViaControl(w http.ResponseWriter, r *http.Request, session string) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	list, err := cs.c.Skills(ctx, session)
	if err != nil {
		fail(w, err)
		return
	}
	out := make([]skillView, 0, len(list))
	for _, sk := range list {
		v := skillView{Name: sk.Name, Version: sk.Version, Description: sk.Description, Scripts: []scriptView{}, Workers: []workerView{},
			Health: map[string]string{}}
		for _, s := range sk.Scripts {
			v.Scripts = append(v.Scripts, scriptView{Name: s.Name, Description: s.Description})
		}
		for _, wi := range sk.Workers {
			v.Workers = append(v.Workers, workerView{ID: wi.ID, Concurrency: wi.Concurrency, Running: wi.Running, LastSeen: wi.LastSeen})
		}
		if session != "" {
			v.Health[session] = sk.Health
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"skills": out})
}

// assetServeTimeout bounds serving one asset object.
const assetServeTimeout = 2 * time.Minute

// asset serves an object of the asset store (an asset's "object",
// sha256-<hex>) with its media type, so the page shows a narration's
// pictures inline. It is streamed, never held whole: read a chunk at a
// time (client.WithDirectAssetReads), hashed on its way to the response,
// its last byte held back until the whole content hashes to its name
// (client.OpenAssetObject). Content that does not, or a read that fails
// midway, aborts the response (the connection is cut, so the browser sees
// an error, never the whole content), is logged and counted. An object
// over the size limit is refused before a byte is sent. It is served under
// a sandboxing Content Security Policy: an SVG opened on its own runs no
// script in the console's origin.
func (cs *Console) asset(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), assetServeTimeout)
	defer cancel()
	name := r.PathValue("object")
	obj, err := cs.c.OpenAssetObject(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if errors.Is(err, client.ErrAssetTooLarge) {
			cs.log.Warn("console: asset object over the size limit refused", slog.String("object", name), slog.Any("error", err))
		}
		fail(w, err)
		return
	}
	defer obj.Close()
	info := obj.Info()
	mediaType := info.MediaType
	if _, _, perr := mime.ParseMediaType(mediaType); perr != nil {
		mediaType = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", mediaType)
	h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	h.Set("Content-Security-Policy", assetCSP)
	h.Set("Cache-Control", "private, max-age=86400, immutable") // named by its content
	n, err := io.Copy(w, obj)
	if err == nil {
		return
	}
	if n == 0 && !errors.Is(err, client.ErrAssetChanged) && r.Context().Err() == nil {
		// Nothing sent yet: a plain error answer (a chunk missing, the store
		// down). Content that is not its name's is cut off below, whatever
		// its length.
		h.Del("Content-Length")
		h.Del("Cache-Control")
		cs.log.Warn("console: asset not read", slog.String("object", name), slog.Any("error", err))
		fail(w, err)
		return
	}
	reason := "read"
	switch {
	case errors.Is(err, client.ErrAssetChanged):
		reason = "changed"
	case errors.Is(err, client.ErrAssetTooLarge):
		reason = "too_large"
	}
	if r.Context().Err() != nil && reason == "read" {
		return // the browser went away
	}
	cs.m.assetAborts.WithLabelValues(reason).Inc()
	cs.log.Error("console: asset response aborted", slog.String("object", name), slog.String("reason", reason),
		slog.Int64("sent", n), slog.Int64("size", info.Size), slog.Any("error", err))
	panic(http.ErrAbortHandler) // cut the connection: the response is incomplete, not done
}
