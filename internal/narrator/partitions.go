package narrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/election"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// Scale-out (docs/spec.md §8.3, §10): sessions map to partitions, and each
// partition has one owning narrator at a time (internal/partition). The
// owner alone narrates the partition's sessions — their stream prompts
// through its own durable consumer of the partition, and the requests it
// receives for them — so a session's prompts are narrated one at a time,
// in order, whichever narrator owns it now. A request that reaches another
// narrator is handed to the owner through the prompt stream (forward).
//
// On taking a partition, a narrator raises its fence (a marker on
// <prefix>.fence.narrator.<p> in NARRATORIA_PLANS) and stamps every plan
// it publishes for the partition with it, so a narrator paused past its
// lease cannot start a plan its successor does not know of; and it
// rewinds the partition's consumer, so the prompts the previous owner
// held come again at once, before newer ones of their sessions.

// partitionGroup is the narrators' group in narratoria_owners.
const partitionGroup = "narrator"

// forwardWaitDefault bounds how long a narrator waits for the owner to
// narrate a request it forwarded (the client's own deadline is usually
// shorter, and a retry with the same promptId joins the same prompt).
const forwardWaitDefault = 2 * time.Minute

// ownedPartition is a partition this narrator owns now: its ownership
// (term, fence, work context), the writer of its fenced plan publishes,
// and its prompts in progress.
type ownedPartition struct {
	*partition.Ownership
	// plans sends the partition's plans (NARRATORIA_PLANS), stamped with
	// the narrator fence.
	plans *partition.Writer
	// room owns the partition's prompts in progress (rooms.go).
	room *room
}

// errNotOwner ends work on a session whose partition this narrator no
// longer owns.
var errNotOwner = fmt.Errorf("narrator: session: %w", partition.ErrNotOwner)

// Status is what the narrator's micro stats report.
type Status struct {
	// ID is the narrator's instance ID.
	ID string `json:"id"`
	// Partitions are the partitions it owns, sorted.
	Partitions []int `json:"partitions"`
	// PartitionCount is how many partitions there are in all.
	PartitionCount int `json:"partitionCount"`
	// PromptsInFlight counts prompts with an ID queued or being narrated.
	PromptsInFlight int `json:"promptsInFlight"`
}

// Status returns the narrator's status.
func (n *Narrator) Status() Status {
	return Status{ID: n.cfg.ID, Partitions: n.Owned(), PartitionCount: n.bus.Partitions, PromptsInFlight: n.inFlight()}
}

// Owned returns the partitions this narrator owns now, sorted.
func (n *Narrator) Owned() []int { return n.owned.Owned() }

// OwnsAll reports whether this narrator owns every partition.
func (n *Narrator) OwnsAll() bool { return n.owned.All() }

func (n *Narrator) ownedPart(p int) *ownedPartition { return n.owned.Get(p) }

// own narrates partition p's prompts while this narrator owns it
// (partition.Own).
func (n *Narrator) own(ctx context.Context, p int, term election.Term) {
	log := n.log.With(slog.Int("partition", p))
	own, err := partition.Take(ctx, n.js, "narrator", n.cfg.ID, p, term, log, n.subj.NarratorFence(p))
	if err != nil {
		return
	}
	defer own.Release()
	pctx := own.Context()
	op := &ownedPartition{Ownership: own}
	op.plans = own.Writer(ctx, 0, "plan", partition.WriterConfig{})
	defer op.plans.Abort()
	n.roomsMu.Lock()
	op.room = newRoom(n, op, n.stopping())
	n.rooms[p] = op.room
	n.roomsMu.Unlock()
	go op.room.run()
	defer func() {
		n.roomsMu.Lock()
		if n.rooms[p] == op.room {
			delete(n.rooms, p)
		}
		n.roomsMu.Unlock()
	}()
	defer n.owned.Remove(p, op)
	// The partition counts as owned (requests narrated here, status,
	// metrics) once its consumer pulls.
	register := func() { n.owned.Add(pctx, p, op) }
	// Intake ends with the ownership, or earlier when the narrator stops.
	fctx, stopFetch := context.WithCancel(pctx)
	defer context.AfterFunc(n.fetchCtx, stopFetch)()
	cfg := jetstream.ConsumerConfig{Durable: fmt.Sprintf("%s-%d", promptsConsumer, p),
		Description: fmt.Sprintf("Prompts of partition %d for its narrator", p), FilterSubject: n.subj.PartitionFilter("prompts", p),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: n.cfg.AckWait, MaxAckPending: 100_000, DeliverPolicy: jetstream.DeliverAllPolicy}
	// The session order needs the rewinds: before the first pull and
	// after any pull that broke (ConsumeInOrder).
	var fetching sync.WaitGroup
	fetching.Add(1)
	go func() {
		defer fetching.Done()
		bus.ConsumeInOrder(fctx, n.js, messages.StreamPrompts, cfg, 256, log, func(m jetstream.Msg) { n.onPromptMsg(op, m) }, register)
	}()
	<-pctx.Done()
	stopFetch()
	fetching.Wait()
	// The partition's prompts in progress end now (unacknowledged: the
	// next owner resumes them from their attempt records): the room ends
	// once every one of them is answered.
	<-op.room.ended
}

// onNarrate serves narratoria.narrate: a prompt in, its narration out. The
// owner of the session's partition narrates it; another narrator forwards
// it to the owner. A request retried with the same promptId while the
// first is still queued or running joins it and gets the same narration.
func (n *Narrator) onNarrate(r micro.Request) {
	// With tenants the subject is <prefix>.narrate.<tenant>, the tenant put
	// there by the server's account import.
	var tenant messages.Tenant
	if n.subj.Tenants {
		tenant = messages.Tenant(r.Subject()[strings.LastIndexByte(r.Subject(), '.')+1:])
	}
	p, err := messages.DecodeTenantPrompt(r.Data(), tenant, "")
	if err != nil {
		n.m.prompts.WithLabelValues("invalid").Inc()
		n.log.Warn("narrator: invalid prompt on narrate", slog.String("problem", err.Error()))
		_ = r.Error("400", err.Error(), nil)
		return
	}
	reply := func(nar *messages.Narration, err error) {
		switch {
		case err == nil:
			_ = r.RespondJSON(nar)
		case errors.Is(err, ErrStopping):
			_ = r.Error("503", ErrStopping.Error()+"; retry with the same promptId", nil)
		case errors.Is(err, errNotOwner) || errors.Is(err, context.Canceled):
			// The real reason, not "stopping": the partition moved (a lease
			// lost, a fence raised by another narrator) mid-way.
			_ = r.Error("503", "the session's partition moved to another narrator while the prompt was in progress; retry with the same promptId", nil)
		default:
			_ = r.Error("500", err.Error(), nil)
		}
	}
	if p.PromptID == "" {
		// Every request is recorded under an ID, so it can be handed to
		// another narrator mid-way and resumed there, never run twice.
		p.PromptID = "req-" + uuid.NewString()
	}
	tctx := tracing.Extract(context.Background(), nats.Header(r.Headers()))
	if op := n.ownedPart(messages.PartitionOf(p.SessionID, n.bus.Partitions)); op != nil {
		// Counted here, or by the owner when the request is forwarded; a
		// request sent again while its prompt is queued or running joins it
		// and is not counted twice.
		if report, err := n.charge(op, tenant, promptKey(p, "")); err != nil {
			n.refused(tenant, err, report)
			_ = r.Error("429", err.Error(), nil)
			return
		}
		op.room.enqueue(tctx, p, "", 0, func(nar *messages.Narration, err error) {
			if errors.Is(err, errNotOwner) || (errors.Is(err, context.Canceled) && n.fetchCtx.Err() == nil) {
				// The partition moved (or its lease lapsed, cancelling the
				// work) while the prompt was queued or being narrated: its
				// new owner — perhaps this narrator again — carries it on.
				n.goForward(tctx, p, reply)
				return
			}
			reply(nar, err)
		})
		return
	}
	n.goForward(tctx, p, reply)
}

// goForward forwards a request on a goroutine Stop waits for; a stopping
// narrator answers ErrStopping instead.
func (n *Narrator) goForward(tctx context.Context, p *messages.Prompt, reply func(*messages.Narration, error)) {
	n.fwdMu.Lock()
	if n.fwdClosed {
		n.fwdMu.Unlock()
		reply(nil, ErrStopping)
		return
	}
	n.forwarding.Add(1)
	n.fwdMu.Unlock()
	go func() {
		defer n.forwarding.Done()
		reply(n.forward(tctx, p))
	}()
}

// forward hands a request for a session this narrator does not own to the
// owner: the prompt is stored under the session's subject in the prompts
// stream (message ID <session>.<promptId>, the session with its tenant,
// as the intake stores a client's: a retry is a duplicate) and its
// narration is awaited on the session's narration subject.
func (n *Narrator) forward(tctx context.Context, p *messages.Prompt) (*messages.Narration, error) {
	key := dedupeKey(p.SessionID, p.PromptID)
	narSubj, err := n.subj.Narrations(p.SessionID)
	if err != nil {
		return nil, err
	}
	promptSubj, err := n.subj.Prompts(p.SessionID)
	if err != nil {
		return nil, err
	}
	sub, err := n.nc.SubscribeSync(narSubj)
	if err != nil {
		return nil, fmt.Errorf("subscribe to narrations: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, cancel := context.WithTimeout(n.ctx, forwardWaitDefault)
	defer cancel()
	defer context.AfterFunc(n.fetchCtx, cancel)() // a stopping narrator answers 503 at once
	if nar, err := n.narrated(ctx, key); err != nil || nar != nil {
		return nar, err
	}
	// The payload names the session as its game server does; the subject
	// says whose it is.
	local := *p
	local.SessionID = messages.LocalSession(p.SessionID)
	body, _ := json.Marshal(&local)
	m := &nats.Msg{Subject: n.subj.Stored(promptSubj, p.SessionID, n.bus.Partitions), Data: body}
	tracing.Inject(tctx, m)
	if _, err := client.PublishRetry(ctx, n.js, m, client.PublishRetryDefault, jetstream.WithMsgID(key)); err != nil {
		return nil, fmt.Errorf("hand the prompt to its partition's narrator: %w", err)
	}
	n.m.forwarded.Inc()
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if nar, serr := n.narrated(context.Background(), key); serr == nil && nar != nil {
				return nar, nil
			}
			if n.fetchCtx.Err() != nil {
				return nil, ErrStopping
			}
			return nil, fmt.Errorf("the narrator owning session %s did not narrate prompt %s within %s; retry with the same promptId: %w",
				p.SessionID, p.PromptID, forwardWaitDefault, err)
		}
		var nar messages.Narration
		if json.Unmarshal(msg.Data, &nar) == nil && nar.PromptID == p.PromptID {
			return &nar, nil
		}
	}
}
