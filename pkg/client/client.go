// Package client is the Go client of Narratoria Runtime for game servers
// and tools: send prompts (request/reply with Narrate, or durably with
// Submit), follow a session's narrations, progress and script events with
// Watch, and steer plans in flight (PlanStatus, ListPlans, Cancel, Approve,
// Deny) — over any NATS connection, with any subject prefix.
//
// A Client is safe for concurrent use; it does not own the connection.
// Under the shipped least-privilege accounts a game server connects with
// its own inbox prefix (nats.CustomInboxPrefix), which the client uses for
// every request.
//
//	nc, _ := nats.Connect(url, nats.UserCredentials("game.creds"))
//	c, _ := client.New(nc)
//	n, err := c.Narrate(ctx, messages.Prompt{SessionID: "s1", Text: "I look around"})
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// ErrNoResponders means nothing serves the subject asked: no narrator for
// Narrate, no active scheduler for the plan control requests.
var ErrNoResponders = errors.New("no responders")

// ServiceError is an error answered by a service: a micro service error
// (Code and Message from its headers) or a control reply's error (Code
// its code, messages.Control*, when it has one). errors.Is matches a
// control reply's code to its sentinel: ErrUnknownPlan, ErrPlanFinished,
// ErrUnknownTool, ErrNotAwaitingApproval, ErrNotInFlight.
type ServiceError struct {
	// Code is the service's error code ("400", "503"…) or the control
	// reply's (unknown_plan, plan_finished…); empty when it gave none.
	Code string
	// Message names the problem.
	Message string
}

// Error implements error.
func (e *ServiceError) Error() string {
	if e.Code == "" || codeErrors[e.Code] != nil {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is the sentinel of e's control code.
func (e *ServiceError) Is(target error) bool {
	sentinel := codeErrors[e.Code]
	return sentinel != nil && (target == sentinel || target == ErrNotInFlight && (sentinel == ErrUnknownPlan || sentinel == ErrPlanFinished))
}

// The refusals of plan control and approvals, each matched by errors.Is
// on the *ServiceError a scheduler answered.
var (
	// ErrUnknownPlan: no scheduler runs the plan and no result of it is
	// stored (never accepted, older than the history window, or another
	// tenant's). Code unknown_plan.
	ErrUnknownPlan = errors.New("unknown plan")
	// ErrPlanFinished: the plan ended; it cannot be cancelled and its
	// tools take no decision. Code plan_finished.
	ErrPlanFinished = errors.New("plan finished")
	// ErrUnknownTool: the plan has no tool of that ID. Code unknown_tool.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrNotAwaitingApproval: the tool takes no decision now (it needs
	// none, was decided, or ended). Code not_awaiting_approval.
	ErrNotAwaitingApproval = errors.New("tool not awaiting approval")
	// ErrNotInFlight: the plan is not in flight (what schedulers of
	// earlier versions answered, code not_in_flight, for a plan that
	// finished or was never accepted). ErrUnknownPlan and ErrPlanFinished
	// match it too.
	ErrNotInFlight = errors.New("plan not in flight")
)

// codeErrors maps control reply codes to their sentinels.
var codeErrors = map[string]error{
	messages.ControlUnknownPlan:         ErrUnknownPlan,
	messages.ControlPlanFinished:        ErrPlanFinished,
	messages.ControlUnknownTool:         ErrUnknownTool,
	messages.ControlNotAwaitingApproval: ErrNotAwaitingApproval,
	messages.ControlNotInFlight:         ErrNotInFlight,
}

// Option configures a Client.
type Option func(*Client)

// WithPrefix sets the subject prefix of the deployment (default
// "narratoria"); it must match the components' nats.subjectPrefix.
func WithPrefix(prefix string) Option { return func(c *Client) { c.subj.Prefix = prefix } }

// WithSubjects names the deployment's subjects as subj does (its prefix
// included): messages.Subjects{Tenants: true, Tenant: messages.AllTenants}
// is the view of a client of a multi-tenant deployment's service account
// across every tenant (an operator's console), whose sessions are
// <tenant>.<session>.
func WithSubjects(subj messages.Subjects) Option { return func(c *Client) { c.subj = subj } }

// WithRequestTimeout bounds the short requests (control, publish acks)
// made without a deadline in their context. Default 10 s.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithNarrateAttempt bounds one request of Narrate before it is retried
// (joining the first). Default 30 s.
func WithNarrateAttempt(d time.Duration) Option { return func(c *Client) { c.attempt = d } }

// Client talks to a Narratoria deployment over one NATS connection.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subj    messages.Subjects
	timeout time.Duration
	attempt time.Duration
	// assetMax bounds an asset object read; assetDirect reads one
	// through direct gets (WithAssetMaxSize, WithDirectAssetReads).
	assetMax    int64
	assetDirect bool
}

// New builds a client on an open connection.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: nil connection")
	}
	c := &Client{nc: nc, timeout: 10 * time.Second, attempt: 30 * time.Second, assetMax: messages.AssetMaxSizeDefault}
	for _, o := range opts {
		o(c)
	}
	if c.subj.Prefix != "" && !messages.ValidToken(c.subj.Prefix) {
		return nil, fmt.Errorf("client: prefix %q must match ^[A-Za-z0-9_-]{1,64}$", c.subj.Prefix)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(c.timeout))
	if err != nil {
		return nil, fmt.Errorf("client: jetstream: %w", err)
	}
	c.js = js
	return c, nil
}

// Subjects returns the deployment's subjects as this client names them.
func (c *Client) Subjects() messages.Subjects { return c.subj }

func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// request sends a core request and turns a micro service error and "no
// responders" into errors.
func (c *Client) request(ctx context.Context, subj string, body []byte) (*nats.Msg, error) {
	m, err := c.nc.RequestWithContext(ctx, subj, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w on %s", ErrNoResponders, subj)
	}
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", subj, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, &ServiceError{Code: code, Message: m.Header.Get("Nats-Service-Error")}
	}
	return m, nil
}

// Narrate sends a prompt and waits for its narration (request/reply on
// <prefix>.narrate); ctx bounds the wait (a narration can take as long as
// its plans: give it a minute). The prompt gets an ID when it has none, so
// Narrate can retry across a narrator restart or a failover — no
// responders, a narrator stopping, or no answer within the attempt timeout
// (WithNarrateAttempt) — and a retry joins the first request (or reads its
// stored narration) instead of running the prompt twice.
//
// With WithProse, the prose a model writes for the narration is handed
// over piece by piece as it streams, before Narrate returns.
func (c *Client) Narrate(ctx context.Context, p messages.Prompt, opts ...NarrateOption) (*messages.Narration, error) {
	if err := checkPrompt(&p); err != nil {
		return nil, err
	}
	var no narrateOptions
	for _, o := range opts {
		o(&no)
	}
	if no.prose != nil {
		stop, err := c.followProse(p, no.prose)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	body, _ := json.Marshal(p)
	var last error
	for backoff := 50 * time.Millisecond; ; backoff = min(backoff*2, 2*time.Second) {
		actx, cancel := context.WithTimeout(ctx, c.attempt)
		m, err := c.request(actx, c.subj.Narrate(), body)
		cancel()
		if err == nil {
			var n messages.Narration
			if err := codec.Unmarshal(m.Data, &n); err != nil {
				return nil, fmt.Errorf("unreadable narration: %w", err)
			}
			return &n, nil
		}
		var se *ServiceError
		again := errors.Is(err, ErrNoResponders) || (errors.As(err, &se) && se.Code == "503") ||
			(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil)
		if !again {
			return nil, err
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("narrate: %w (last error: %v)", ctx.Err(), last)
		case <-time.After(backoff):
		}
	}
}

// checkPrompt gives the prompt an ID when it has none and checks what the
// narrator would refuse, so the caller learns it before sending.
func checkPrompt(p *messages.Prompt) error {
	if p.PromptID == "" {
		p.PromptID = uuid.NewString()
	}
	// The narrator's own rules (messages.DecodePrompt), so a prompt it
	// would drop is refused here, with its words, before it is stored.
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode prompt: %w", err)
	}
	if _, err := messages.DecodePrompt(body, ""); err != nil {
		return err
	}
	return nil
}

// Submit publishes a prompt durably on <prefix>.prompts.<session> and
// returns once JetStream stored it (its PromptID, generated when empty).
// It survives a narrator restart and a cluster failover: the publish is
// retried until ctx ends, deduplicated by the prompt ID (header
// Nats-Msg-Id), so it is stored once. The narration comes on
// <prefix>.narrations.<session> (see Watch).
func (c *Client) Submit(ctx context.Context, p messages.Prompt) (string, error) {
	if err := checkPrompt(&p); err != nil {
		return "", err
	}
	subj, err := c.subj.Prompts(p.SessionID)
	if err != nil {
		return "", err
	}
	body, _ := json.Marshal(p)
	msg := &nats.Msg{Subject: subj, Data: body}
	_, err = PublishRetry(ctx, c.js, msg, untilDone, jetstream.WithMsgID(p.SessionID+"."+p.PromptID),
		jetstream.WithExpectStream(messages.StreamPrompts))
	if err != nil {
		return "", fmt.Errorf("submit prompt: %w", err)
	}
	return p.PromptID, nil
}

// untilDone is the retry bound of a publish that only its context ends.
const untilDone = 100 * 365 * 24 * time.Hour

// Approve grants a tool waiting for approval (§9.3): Decide with an
// approval.
func (c *Client) Approve(ctx context.Context, planID, toolID, by, reason string) error {
	_, err := c.Decide(ctx, planID, toolID, messages.Approval{Approved: true, By: by, Reason: reason})
	return err
}

// Deny refuses a tool waiting for approval; it is skipped and its
// dependents fail (§9.3): Decide with a denial.
func (c *Client) Deny(ctx context.Context, planID, toolID, by, reason string) error {
	_, err := c.Decide(ctx, planID, toolID, messages.Approval{Approved: false, By: by, Reason: reason})
	return err
}

// Decided is what Decide did.
type Decided struct {
	// Checked says the plan's scheduler answered the check before the
	// decision was sent, with the tool (Tool). false: no scheduler
	// answered then, and the decision was sent until one took it at the
	// approvals door, which checks it the same way before storing it.
	Checked bool
	// Tool is the tool as the check saw it, with the input it will run
	// with (nil when Checked is false).
	Tool *messages.ToolStatus
}

// Decide takes a decision on a tool that waits for approval, or will
// (§9.3). It first asks the plan's scheduler whether the tool takes a
// decision now (<prefix>.control.approval.<plan>.<tool>): an unknown
// plan or tool, a tool that does not wait, and a finished plan are
// refused (a *ServiceError matching ErrUnknownPlan, ErrUnknownTool,
// ErrNotAwaitingApproval or ErrPlanFinished) and nothing is stored. Then
// it publishes the decision on <prefix>.approvals.<plan>.<tool>, where a
// scheduler checks it again and stores it durably (a JetStream error
// naming why when it refuses); the scheduler running the plan applies it,
// even one that takes the plan over later. When no scheduler answers the
// check (a failover), the decision is sent again until one takes it at
// the door or ctx ends; nothing is stored without a scheduler's check, as
// no client writes the approvals stream itself (issue 45).
func (c *Client) Decide(ctx context.Context, planID, toolID string, a messages.Approval) (*Decided, error) {
	subj, err := c.subj.Approvals(planID, toolID)
	if err != nil {
		return nil, err
	}
	check, err := c.subj.ApprovalCheckSubject(planID, toolID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	d := &Decided{}
	r, err := c.control(ctx, check, nil)
	switch {
	case err == nil && r.Approval != nil:
		d.Checked, d.Tool = true, &r.Approval.Tool
		// Across tenants, the decision goes where the plan's own tenant's
		// decisions are stored.
		if subj, err = c.subj.ForSession(r.Approval.SessionID).Approvals(planID, toolID); err != nil {
			return nil, err
		}
	case err == nil:
		return nil, fmt.Errorf("approval check of %s/%s: reply without an answer", planID, toolID)
	case !errors.Is(err, ErrNoResponders):
		return nil, fmt.Errorf("approval of %s/%s: %w", planID, toolID, err)
	case c.subj.Tenant == messages.AllTenants:
		return nil, fmt.Errorf("approval of %s/%s: %w: across tenants a decision needs the plan's tenant, which only a scheduler knows", planID, toolID, err)
	}
	// No scheduler answered the check (none runs now: a failover, a
	// restart): the decision is sent until one takes it at the door, which
	// checks it the same way, or ctx ends.
	body, _ := json.Marshal(a)
	_, err = PublishRetry(ctx, c.js, &nats.Msg{Subject: subj, Data: body}, untilDone, jetstream.WithExpectStream(messages.StreamApprovals))
	switch {
	case err != nil && !d.Checked:
		return nil, fmt.Errorf("approval of %s/%s: %w: no scheduler took the decision, nothing was stored (%w)", planID, toolID, ErrNoResponders, err)
	case err != nil:
		return nil, fmt.Errorf("approval of %s/%s: %w", planID, toolID, err)
	}
	return d, nil
}

// control sends a plan control request and returns its reply, or the
// error it names.
func (c *Client) control(ctx context.Context, subj string, body []byte) (*messages.ControlReply, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	m, err := c.request(ctx, subj, body)
	if err != nil {
		if errors.Is(err, ErrNoResponders) {
			return nil, fmt.Errorf("%w: no active scheduler answers plan control", err)
		}
		return nil, err
	}
	var r messages.ControlReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("unreadable control reply: %w", err)
	}
	if !r.OK {
		return nil, &ServiceError{Code: r.Code, Message: r.Error}
	}
	return &r, nil
}

// PlanStatus returns the status of a plan: one in flight, its tools with
// state, attempt and timings, and its versions (§9.4); one that finished,
// from its stored result (phase published, Result saying how it ended).
// A plan no scheduler runs and no result names is a *ServiceError
// matching ErrUnknownPlan.
func (c *Client) PlanStatus(ctx context.Context, planID string) (*messages.PlanStatus, error) {
	subj, err := c.subj.PlanStatusSubject(planID)
	if err != nil {
		return nil, err
	}
	r, err := c.control(ctx, subj, nil)
	if err != nil {
		return nil, err
	}
	if r.Status == nil {
		return nil, errors.New("control reply without a status")
	}
	return r.Status, nil
}

// ListPlans returns the plans in flight, of one session when session is
// not empty.
func (c *Client) ListPlans(ctx context.Context, session string) ([]messages.PlanSummary, error) {
	body, _ := json.Marshal(messages.PlanListRequest{SessionID: session})
	r, err := c.control(ctx, c.subj.PlanListSubject(), body)
	if err != nil {
		return nil, err
	}
	if r.List == nil {
		return []messages.PlanSummary{}, nil
	}
	return r.List.Plans, nil
}

// Cancel cancels a plan in flight: its running scripts are killed, its
// unfinished tools end cancelled and its result says failureReason
// "cancelled" (never replanned). A finished plan is a *ServiceError
// matching ErrPlanFinished, an unknown one ErrUnknownPlan.
func (c *Client) Cancel(ctx context.Context, planID, by, reason string) error {
	subj, err := c.subj.PlanCancelSubject(planID)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(messages.CancelRequest{By: by, Reason: reason})
	_, err = c.control(ctx, subj, body)
	return err
}

// History returns a page of finished plans, newest first, with the
// request's filters (session, state, skill, failure reason, plan ID
// prefix, time range; Before pages), from the results stream as a
// scheduler indexes it (<prefix>.control.history): a tenant's client sees
// its own plans only.
func (c *Client) History(ctx context.Context, req messages.HistoryRequest) (*messages.HistoryPage, error) {
	body, _ := json.Marshal(req)
	r, err := c.control(ctx, c.subj.HistorySubject(), body)
	if err != nil {
		return nil, err
	}
	if r.History == nil {
		return nil, errors.New("history reply without a page")
	}
	return r.History, nil
}

// Skills returns the registered skills, each with its scripts and live
// workers and, when session is not empty, its health in that session, as
// a scheduler follows the registry (<prefix>.control.skills).
func (c *Client) Skills(ctx context.Context, session string) ([]messages.SkillSummary, error) {
	body, _ := json.Marshal(messages.SkillsRequest{SessionID: session})
	r, err := c.control(ctx, c.subj.SkillsSubject(), body)
	if err != nil {
		return nil, err
	}
	if r.Skills == nil {
		return []messages.SkillSummary{}, nil
	}
	return r.Skills, nil
}

// ResetResult is what a session reset did.
type ResetResult struct {
	// ChangedSkills counts the skills made healthy again.
	ChangedSkills int `json:"changedSkills"`
	// ClearedState says the session state was emptied.
	ClearedState bool `json:"clearedState"`
}

// ResetSession makes every skill of a session healthy again; clearState
// also empties its state.
func (c *Client) ResetSession(ctx context.Context, session string, clearState bool) (*ResetResult, error) {
	subj, err := c.subj.SessionReset(session)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(messages.SessionReset{ClearState: clearState})
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	m, err := c.request(ctx, subj, body)
	if err != nil {
		return nil, err
	}
	var r struct {
		ResetResult
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("unreadable reset reply: %w", err)
	}
	if !r.OK {
		return nil, &ServiceError{Message: r.Error}
	}
	return &r.ResetResult, nil
}
