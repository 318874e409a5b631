// Package history indexes finished plans: every Execution Result on
// NARRATORIA_RESULTS, read through an ordered consumer that takes only the
// results' summary headers (messages.HeaderResult*: a few hundred bytes a
// plan, so 100,000 plans load in about a second) and follows the stream
// live. The console's history search and the schedulers' history endpoint
// (<prefix>.control.history, which a tenant's clients reach through their
// account's narrowed import of plan control) both page it with the same
// filters: session, state, skill, failure reason, plan ID prefix and time.
package history

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// Max bounds the plans an index holds (the oldest go first); the results
// stream bounds it too (its age and size limits).
const Max = 500_000

// Index is an index of every plan on NARRATORIA_RESULTS, newest last. It
// starts reading with Start (or the first Search) and stops with Stop;
// it is safe for concurrent use.
type Index struct {
	js   jetstream.JetStream
	subj messages.Subjects
	log  *slog.Logger

	once   sync.Once
	mu     sync.RWMutex
	plans  []messages.FinishedPlan
	caught chan struct{} // closed once the index reached both streams' ends
	// resultsCaught and promptsCaught each say one stream is read (or
	// cannot be); caught closes after both.
	resultsCaught, promptsCaught func()
	err                          error
	cons                         jetstream.ConsumeContext
	// prompts are the player's words each plan answered, from the
	// narrations' summary headers (a second consumer, prompted), oldest
	// first in order to bound them.
	prompts  map[string]string
	order    []string
	prompted jetstream.ConsumeContext
	cancel   context.CancelFunc
	// onAdd, when set, is called (outside the lock) with each plan added
	// live, after the index caught up.
	onAdd func(messages.FinishedPlan)
}

// New makes an index of the results stream js reaches, whose subjects
// are subj's. Nothing is read before Start.
func New(js jetstream.JetStream, subj messages.Subjects, log *slog.Logger) *Index {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	caught := make(chan struct{})
	var left atomic.Int32
	left.Store(2) // the results, and the narrations' prompts
	done := func() {
		if left.Add(-1) == 0 {
			close(caught)
		}
	}
	return &Index{js: js, subj: subj, log: log, caught: caught, resultsCaught: sync.OnceFunc(done), promptsCaught: sync.OnceFunc(done),
		prompts: map[string]string{}}
}

// OnAdd sets a function called with each plan that finishes once the
// index has caught up (the console refreshes its history list with it).
// Call it before Start.
func (x *Index) OnAdd(fn func(messages.FinishedPlan)) { x.onAdd = fn }

// Caught is closed once the index has read the whole stream as it was
// when it started (or failed: Search says why).
func (x *Index) Caught() <-chan struct{} { return x.caught }

// Start opens the ordered consumer, once; later calls do nothing.
func (x *Index) Start() {
	x.once.Do(x.start)
}

func (x *Index) start() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	x.mu.Lock()
	x.cancel = cancel
	x.mu.Unlock()
	fail := func(err error) {
		x.mu.Lock()
		x.err = err
		x.mu.Unlock()
		x.resultsCaught()
		x.promptsCaught() // nothing more comes
	}
	st, err := x.js.Stream(ctx, messages.StreamResults)
	if err != nil {
		fail(fmt.Errorf("history: open %s: %w", messages.StreamResults, err))
		return
	}
	live := st.CachedInfo().State.Msgs == 0 // an empty stream: caught up already
	if live {
		x.resultsCaught()
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		fail(fmt.Errorf("history: read %s: %w", messages.StreamResults, err))
		return
	}
	cons, err := c.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		e, ok := x.entry(m, md)
		if ok {
			x.add(e)
			if live && x.onAdd != nil {
				x.onAdd(e)
			}
		}
		if md.NumPending == 0 && !live {
			live = true
			x.resultsCaught()
		}
	})
	if err != nil {
		fail(fmt.Errorf("history: read %s: %w", messages.StreamResults, err))
		return
	}
	x.mu.Lock()
	x.cons = cons
	x.mu.Unlock()
	x.followPrompts(ctx)
}

// followPrompts reads the narrations' summary headers (which prompt each
// plan answered) into the index, live. Without them (a narrations stream
// it cannot read) the history has no prompts, and says so in the log.
func (x *Index) followPrompts(ctx context.Context) {
	st, err := x.js.Stream(ctx, messages.StreamNarrations)
	var c jetstream.Consumer
	if err == nil {
		c, err = st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy})
	}
	var cons jetstream.ConsumeContext
	caught := x.promptsCaught
	if err == nil && st.CachedInfo().State.Msgs == 0 {
		caught()
	}
	if err == nil {
		cons, err = c.Consume(func(m jetstream.Msg) {
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				defer caught()
			}
			h := m.Headers()
			prompt, plans := h.Get(messages.HeaderNarrationPrompt), h.Get(messages.HeaderNarrationPlans)
			if prompt == "" || plans == "" {
				return
			}
			x.mu.Lock()
			defer x.mu.Unlock()
			for _, plan := range strings.Split(plans, ",") {
				if _, ok := x.prompts[plan]; !ok {
					x.order = append(x.order, plan)
				}
				x.prompts[plan] = prompt
			}
			for len(x.order) > Max {
				delete(x.prompts, x.order[0])
				x.order = x.order[1:]
			}
		})
	}
	if err != nil {
		caught()
		x.log.Warn("history: the narrations' prompts are not read; the history shows none", slog.Any("error", err))
		return
	}
	x.mu.Lock()
	x.prompted = cons
	x.mu.Unlock()
}

// entry reads one result's summary from its subject and headers; ok is
// false for a message that is not a plan's result (the unaddressed
// results of plans without a usable ID).
func (x *Index) entry(m jetstream.Msg, md *jetstream.MsgMetadata) (messages.FinishedPlan, bool) {
	rest, ok := strings.CutPrefix(m.Subject(), x.subj.Root()+".results.")
	i := strings.LastIndexByte(rest, '.')
	if !ok || i <= 0 || messages.CheckPlanID(rest[i+1:]) != nil {
		return messages.FinishedPlan{}, false
	}
	hd := m.Headers()
	e := messages.FinishedPlan{PlanID: rest[i+1:], SessionID: rest[:i], State: hd.Get(messages.HeaderResultState),
		FailureReason: hd.Get(messages.HeaderResultReason), FinishedAt: md.Timestamp, Seq: md.Sequence.Stream, Skills: []string{}}
	if e.State == "" {
		e.State = "unknown" // stored by a version before the summary headers
	}
	if s := hd.Get(messages.HeaderResultSkills); s != "" {
		e.Skills = strings.Split(s, ",")
	}
	e.ExecutionTimeMs, _ = strconv.ParseInt(hd.Get(messages.HeaderResultDuration), 10, 64)
	return e, true
}

// add indexes one finished plan.
func (x *Index) add(e messages.FinishedPlan) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.plans = append(x.plans, e)
	if len(x.plans) > Max {
		x.plans = slices.Delete(x.plans, 0, len(x.plans)-Max)
	}
}

// Stop ends the consumer; a Search after it answers what was read.
func (x *Index) Stop() {
	x.once.Do(func() { x.resultsCaught(); x.promptsCaught() }) // an index never started starts nothing later
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range []*jetstream.ConsumeContext{&x.cons, &x.prompted} {
		if *c != nil {
			(*c).Stop()
			*c = nil
		}
	}
	if x.cancel != nil {
		x.cancel()
	}
}

// Query is a search of the index: the request's filters, seen by tenant
// ("" for the service's own view, every session). A tenant sees only its
// own sessions' plans, named as its game servers name them (without the
// tenant), and names its sessions so.
type Query struct {
	messages.HistoryRequest
	Tenant messages.Tenant
}

// CheckQuery checks a request's filters, naming the bad one.
func CheckQuery(q messages.HistoryRequest) error {
	switch q.State {
	case "", messages.PlanSucceeded, messages.PlanFailed, messages.PlanTimeout, messages.PlanCancelled, "unknown":
	default:
		return fmt.Errorf("state %q: want succeeded, failed, timeout or cancelled", q.State)
	}
	if q.Limit < 0 || q.Limit > messages.HistoryPageMax {
		return fmt.Errorf("limit: must be 1..%d, got %d", messages.HistoryPageMax, q.Limit)
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return fmt.Errorf("from (%s) must be before to (%s)", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	return nil
}

// matches reports whether e is one q asks for; session is e's session as
// the query names sessions.
func (q *Query) matches(e *messages.FinishedPlan, session string) bool {
	return (q.SessionID == "" || session == q.SessionID) && (q.State == "" || e.State == q.State) &&
		(q.FailureReason == "" || e.FailureReason == q.FailureReason) && (q.Skill == "" || slices.Contains(e.Skills, q.Skill)) &&
		(q.PlanID == "" || strings.HasPrefix(e.PlanID, q.PlanID)) &&
		(q.From.IsZero() || !e.FinishedAt.Before(q.From)) && (q.To.IsZero() || e.FinishedAt.Before(q.To))
}

// sessionFor is e's session as the query's tenant names it; ok is false
// for another tenant's plan.
func (q *Query) sessionFor(e *messages.FinishedPlan) (string, bool) {
	if q.Tenant == "" {
		return e.SessionID, true
	}
	if messages.TenantOf(e.SessionID) != q.Tenant {
		return "", false
	}
	return messages.LocalSession(e.SessionID), true
}

// Search runs q over the index, newest first. It answers what the index
// holds now: Loading says it has not caught up with the stream yet.
func (x *Index) Search(q Query) (messages.HistoryPage, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.err != nil {
		return messages.HistoryPage{}, x.err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = messages.HistoryPageMax
	}
	out := messages.HistoryPage{Plans: []messages.FinishedPlan{}}
	select {
	case <-x.caught:
	default:
		out.Loading = true
	}
	for i := len(x.plans) - 1; i >= 0; i-- {
		e := &x.plans[i]
		session, ok := q.sessionFor(e)
		if !ok || !q.matches(e, session) {
			continue
		}
		out.Total++
		if q.Before != 0 && e.Seq >= q.Before {
			continue
		}
		if len(out.Plans) < limit {
			p := *e
			p.SessionID, p.Prompt = session, x.prompts[p.PlanID]
			out.Plans = append(out.Plans, p)
		} else if out.Next == 0 {
			out.Next = out.Plans[len(out.Plans)-1].Seq
		}
	}
	return out, nil
}
