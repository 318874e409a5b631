package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// StreamConfigs returns the configuration of every stream of the product.
func (c Config) StreamConfigs() []jetstream.StreamConfig {
	c = c.WithDefaults()
	storage := jetstream.FileStorage
	if c.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	s := func(name, kind, desc string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    []string{c.Prefix + "." + kind + ".>"},
			Storage:     storage,
			Replicas:    c.Replicas,
			MaxAge:      c.HistoryMaxAge,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardNew,
			MaxBytes:    c.StreamMaxBytes,
			Duplicates:  min(c.DuplicateWindow, c.HistoryMaxAge),
			AllowDirect: true,
		}
	}
	prompts := s(messages.StreamPrompts, "prompts", "Prompts from game servers, one subject per session")
	narrations := s(messages.StreamNarrations, "narrations", "Narrations, one subject per session")
	plans := s(messages.StreamPlans, "plans", "Plan JSON documents to execute, one subject per session")
	results := s(messages.StreamResults, "results", "Execution Results, per session and plan")
	events := s(messages.StreamEvents, "events", "Protocol events emitted by skill scripts")
	// History streams drop their oldest messages at the size limit; the
	// others refuse new ones (the publisher gets an error), so nothing in
	// progress is dropped silently.
	for _, h := range []*jetstream.StreamConfig{&narrations, &results, &events} {
		h.Discard = jetstream.DiscardOld
	}
	events.MaxAge = c.EventsMaxAge
	events.Duplicates = min(c.DuplicateWindow, c.EventsMaxAge)
	jobs := s(messages.StreamJobs, "jobs", "Internal: tool jobs, one subject per skill (work queue)")
	jobs.Retention = jetstream.WorkQueuePolicy
	outcomes := s(messages.StreamOutcomes, "outcomes", "Internal: tool outcomes from skill workers (work queue)")
	outcomes.Retention = jetstream.WorkQueuePolicy
	approvals := s(messages.StreamApprovals, "approvals", "Approval decisions, one subject per plan and tool (work queue of the active scheduler)")
	approvals.Retention = jetstream.WorkQueuePolicy
	return []jetstream.StreamConfig{prompts, narrations, plans, results, events, jobs, outcomes, approvals}
}

// BucketConfigs returns the configuration of every KV bucket of the product.
func (c Config) BucketConfigs() []jetstream.KeyValueConfig {
	c = c.WithDefaults()
	storage := jetstream.FileStorage
	if c.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	b := func(name, desc string, history uint8) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: name, Description: desc, History: history, Storage: storage, Replicas: c.Replicas,
			MaxBytes: c.BucketMaxBytes}
	}
	reuse := b(messages.BucketReuse, "Internal: outcomes a replan of the same prompt reuses, and plan lineage", 1)
	reuse.TTL = ReuseTTLDefault
	prompts := b(messages.BucketPrompts, "Internal: narrations of recent prompts by <session>.<promptId>, for dedupe", 1)
	prompts.TTL = c.PromptDedupeTTL
	inflight := b(messages.BucketInflight, "Internal: the running attempt of each prompt being narrated, by <session>.<promptId>", 1)
	inflight.TTL = c.PromptDedupeTTL
	return []jetstream.KeyValueConfig{
		b(messages.BucketSessions, "Session state, key <session>", 5),
		b(messages.BucketHealth, "Skill health, key <session>.<skill>", 5),
		b(messages.BucketSkills, "Skill registry, key <skill>", 1),
		b(messages.BucketPlans, "Internal: scheduler state of in-flight plans", 1),
		prompts,
		reuse,
		inflight,
	}
}

// Provision creates every stream and bucket that is missing and updates
// those whose configuration differs. It is idempotent and safe to run from
// several components at once; a stream already as configured is not
// touched (which also keeps concurrent starts from updating it in a race).
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	_, err := ProvisionReport(ctx, js, c)
	return err
}

// Provisioned says what Provision did to one stream or bucket.
type Provisioned struct {
	// Name is the stream, or "KV <bucket>".
	Name string
	// Action is created, updated or unchanged.
	Action string
}

// ProvisionReport is Provision, saying what it did to each stream and
// bucket.
func ProvisionReport(ctx context.Context, js jetstream.JetStream, c Config) ([]Provisioned, error) {
	var out []Provisioned
	for _, sc := range c.StreamConfigs() {
		action, err := provisionStreamAction(ctx, js, sc)
		if err != nil {
			return out, fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
		out = append(out, Provisioned{Name: sc.Name, Action: action})
	}
	for _, kc := range c.BucketConfigs() {
		if _, err := js.KeyValue(ctx, kc.Bucket); err == nil {
			out = append(out, Provisioned{Name: "KV " + kc.Bucket, Action: "unchanged"})
			continue
		} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return out, fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
		}
		if _, err := js.CreateKeyValue(ctx, kc); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return out, fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
		}
		out = append(out, Provisioned{Name: "KV " + kc.Bucket, Action: "created"})
	}
	return out, nil
}

func provisionStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	_, err := provisionStreamAction(ctx, js, want)
	return err
}

func provisionStreamAction(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (string, error) {
	st, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return "unchanged", nil // a concurrent start created it
		}
		return "created", err
	case err != nil:
		return "", err
	}
	have := st.CachedInfo().Config
	if slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.MaxAge == want.MaxAge && have.Duplicates == want.Duplicates &&
		have.AllowDirect == want.AllowDirect && have.MaxBytes == want.MaxBytes && have.Discard == want.Discard &&
		have.Replicas == want.Replicas && have.Storage == want.Storage {
		return "unchanged", nil
	}
	_, err = js.UpdateStream(ctx, want)
	return "updated", err
}
