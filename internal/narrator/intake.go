package narrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// Prompt intake (issue 45): NARRATORIA_PROMPTS takes no client's publish.
// A game server publishes a durable prompt on <prefix>.prompts.<session>
// (a tenant's arrives as <prefix>.prompts.<tenant>.<session>) with
// JetStream, as before; one narrator (queue group intakeQueueGroup) takes
// it here, checks it and stores it on the session's stored subject
// (<prefix>.prompts.<partition>.<session>), with a message ID that
// carries the tenant, and answers with the stream's ack — or refuses it
// with a JetStream error naming why:
//
//   - a subject whose session is no subject token (the literal
//     <prefix>.prompts.> or .*, which no mapping or permission can tell
//     from a session: nats-server matches a literal wildcard token as any
//     token) — 400;
//   - a body that is not a prompt, decoded exactly — 400;
//   - a tenant (without tenants: the game servers together) with
//     nats.promptsPerTenant prompts waiting — 429;
//   - and the stream's own refusals, relayed: a session with
//     nats.promptsPerSession prompts waiting ("maximum messages per
//     subject exceeded"), a full stream.
//
// A narrator stores what it takes in the order it took it. A client that
// sends a session's next prompt before the previous one's ack (client
// Submit waits for each) may see them stored in another order when several
// narrators run: each may take one.

// Intake error codes: what a refusal's JetStream error carries.
const (
	intakeInvalid   = http.StatusBadRequest
	intakeOverShare = http.StatusTooManyRequests
	intakeUnstored  = http.StatusServiceUnavailable
)

// shareRefresh is how often a tenant's prompts waiting are read from the
// stream; shareRetry how often once the tenant is at its share (its
// refusals answered from the last read meanwhile).
const (
	shareRefresh = 250 * time.Millisecond
	shareRetry   = 50 * time.Millisecond
)

// intakeQueueGroup is the narrators' queue group on the prompts game
// servers publish: one narrator takes each.
const intakeQueueGroup = "narratoria-narrator-intake"

// startIntake subscribes to the prompts game servers publish; it stops
// with intake (fetchCtx).
func (n *Narrator) startIntake() error {
	subject := n.subj.Root() + ".prompts.*"
	if n.subj.Tenants {
		subject += ".*"
	}
	st, err := n.js.Stream(n.ctx, messages.StreamPrompts)
	if err != nil {
		return fmt.Errorf("narrator: open stream %s: %w", messages.StreamPrompts, err)
	}
	n.shares = newPromptShares(n.bus.PromptsPerTenant, func(ctx context.Context, tenant messages.Tenant) (int, error) {
		return waitingOf(ctx, st, n.subj.Root(), tenant)
	})
	n.intakeLog = newReportLimiter(time.Second)
	sub, err := n.nc.QueueSubscribe(subject, intakeQueueGroup, n.onIntake)
	if err != nil {
		return fmt.Errorf("narrator: subscribe to %s: %w", subject, err)
	}
	context.AfterFunc(n.fetchCtx, func() { _ = sub.Unsubscribe() })
	return nil
}

// onIntake takes one prompt a client published.
func (n *Narrator) onIntake(m *nats.Msg) {
	session := strings.TrimPrefix(m.Subject, n.subj.Root()+".prompts.")
	var tenant messages.Tenant
	if n.subj.Tenants {
		tenant = messages.TenantOf(session)
	}
	if err := n.subj.CheckSession(session); err != nil {
		n.refuseIntake(m, tenant, "invalid", intakeInvalid, "invalid prompt: the subject names no session: "+err.Error())
		return
	}
	p, err := messages.DecodeTenantPrompt(m.Data, tenant, messages.LocalSession(session))
	if err != nil {
		n.refuseIntake(m, tenant, "invalid", intakeInvalid, err.Error())
		return
	}
	if err := n.shares.admit(n.ctx, tenant, time.Now()); err != nil {
		n.refuseIntake(m, tenant, "share", intakeOverShare, err.Error())
		return
	}
	out := &nats.Msg{Subject: n.subj.Stored(m.Subject, session, n.bus.Partitions), Data: m.Data, Header: nats.Header{}}
	for _, h := range []string{"traceparent", "tracestate", jetstream.ExpectedStreamHeader} {
		if v := m.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	// The message ID carries the tenant (the session is
	// <tenant>.<session>): the same prompt ID from two tenants is two
	// prompts. A prompt with an ID shares it with the narrate request
	// handed over for it (forward).
	var opts []jetstream.PublishOpt
	if p.PromptID != "" {
		opts = append(opts, jetstream.WithMsgID(dedupeKey(p.SessionID, p.PromptID)))
	} else if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		opts = append(opts, jetstream.WithMsgID(tenant.Qualify(id)))
	}
	ack, err := n.js.PublishMsgAsync(out, opts...)
	if err != nil {
		n.refuseIntake(m, tenant, "store", intakeUnstored, "the prompt was not stored: "+err.Error())
		return
	}
	n.life.Go(func(ctx context.Context) { n.answerIntake(ctx, m, tenant, ack) })
}

// answerIntake answers a stored prompt's publisher with the stream's ack,
// or its refusal.
func (n *Narrator) answerIntake(ctx context.Context, m *nats.Msg, tenant messages.Tenant, ack jetstream.PubAckFuture) {
	select {
	case pa := <-ack.Ok():
		n.m.intake.WithLabelValues("stored").Inc()
		b, _ := json.Marshal(pa)
		_ = m.Respond(b)
	case err := <-ack.Err():
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			n.refuseIntakeWith(m, tenant, "store", apiErr.Code, apiErr.ErrorCode, apiErr.Description)
			return
		}
		n.refuseIntake(m, tenant, "store", intakeUnstored, "the prompt was not stored: "+err.Error())
	case <-ctx.Done():
		// Stopping: no answer, and the client sends it again.
	}
}

// refuseIntake answers a prompt refused at intake with a JetStream error
// (its publisher's js.Publish returns it), counts it and logs it.
func (n *Narrator) refuseIntake(m *nats.Msg, tenant messages.Tenant, reason string, code int, problem string) {
	n.refuseIntakeWith(m, tenant, reason, code, 0, problem)
}

func (n *Narrator) refuseIntakeWith(m *nats.Msg, tenant messages.Tenant, reason string, code int, errCode jetstream.ErrorCode, problem string) {
	n.m.intake.WithLabelValues(reason).Inc()
	n.m.intakeRefused.WithLabelValues(reason, tenant.String()).Inc()
	if count := n.intakeLog.note(tenant.String()+"/"+reason, time.Now()); count > 0 {
		n.log.Warn("narrator: prompts refused at intake", slog.String("tenant", tenant.String()), slog.String("reason", reason),
			slog.Int("refused", count), slog.String("subject", m.Subject), slog.String("problem", problem))
	}
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "err_code": errCode, "description": problem}})
	_ = m.Respond(b)
}

// waitingOf counts the prompts of tenant waiting in the prompts stream:
// its subjects' messages, or with no tenant every message.
func waitingOf(ctx context.Context, st jetstream.Stream, prefix string, tenant messages.Tenant) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if tenant == "" {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return int(info.State.Msgs), nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+".prompts.*."+tenant.String()+".*"))
	if err != nil {
		return 0, err
	}
	total := 0
	for _, c := range info.State.Subjects {
		total += int(c)
	}
	return total, nil
}

// promptShares keeps each tenant's share of the prompts stream: how many
// of its prompts wait there, read from the stream at most every
// shareRefresh (every shareRetry while it is at its share), plus the ones
// stored here since. The shares of tenants several narrators take prompts
// for may each run up to one read's worth over: the read is the stream's
// count, which every narrator's stores reach.
type promptShares struct {
	max  int
	read func(ctx context.Context, tenant messages.Tenant) (int, error)

	mu     sync.Mutex
	tenant map[messages.Tenant]*share
}

// share is one tenant's.
type share struct {
	waiting int       // at the last read
	readAt  time.Time // zero: never read
	added   int       // stored here since
}

func newPromptShares(limit int, read func(ctx context.Context, tenant messages.Tenant) (int, error)) *promptShares {
	return &promptShares{max: limit, read: read, tenant: map[messages.Tenant]*share{}}
}

// admit counts one more prompt of tenant's, or returns the error saying
// its share is full. A read that fails admits the prompt (the stream's
// own limits still hold).
func (s *promptShares) admit(ctx context.Context, tenant messages.Tenant, now time.Time) error {
	s.mu.Lock()
	sh := s.tenant[tenant]
	if sh == nil {
		sh = &share{}
		s.tenant[tenant] = sh
	}
	full := sh.waiting+sh.added >= s.max
	stale := now.Sub(sh.readAt) >= shareRefresh || (full && now.Sub(sh.readAt) >= shareRetry)
	s.mu.Unlock()
	if stale {
		if n, err := s.read(ctx, tenant); err == nil {
			s.mu.Lock()
			sh.waiting, sh.readAt, sh.added = n, now, 0
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh.waiting+sh.added >= s.max {
		who := fmt.Sprintf("tenant %q", tenant)
		if tenant == "" {
			who = "the game servers"
		}
		return fmt.Errorf("%s have %d prompts waiting to be narrated, their share of the prompts stream (nats.promptsPerTenant); send it again once the narrator took some",
			who, sh.waiting+sh.added)
	}
	sh.added++
	return nil
}

// reportLimiter says when to log a repeated event: at most once per
// period per key, with how many happened since the last line.
type reportLimiter struct {
	period time.Duration
	mu     sync.Mutex
	keys   map[string]*reportCount
}

type reportCount struct {
	n  int
	at time.Time
}

func newReportLimiter(period time.Duration) *reportLimiter {
	return &reportLimiter{period: period, keys: map[string]*reportCount{}}
}

// note counts one event of key at now and returns how many to log now (0:
// none; the next line counts this one).
func (r *reportLimiter) note(key string, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.keys[key]
	if c == nil {
		if len(r.keys) > 4096 {
			clear(r.keys)
		}
		c = &reportCount{}
		r.keys[key] = c
	}
	c.n++
	if now.Sub(c.at) < r.period {
		return 0
	}
	n := c.n
	c.n, c.at = 0, now
	return n
}
