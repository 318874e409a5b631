package bus

import (
	"context"
	"errors"
	"fmt"

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
			Discard:     jetstream.DiscardOld,
		}
	}
	prompts := s(messages.StreamPrompts, "prompts", "Prompts from game servers, one subject per session")
	narrations := s(messages.StreamNarrations, "narrations", "Narrations, one subject per session")
	plans := s(messages.StreamPlans, "plans", "Plan JSON documents to execute, one subject per session")
	results := s(messages.StreamResults, "results", "Execution Results, per session and plan")
	events := s(messages.StreamEvents, "events", "Protocol events emitted by skill scripts")
	events.MaxAge = c.EventsMaxAge
	jobs := s(messages.StreamJobs, "jobs", "Internal: tool jobs, one subject per skill (work queue)")
	jobs.Retention = jetstream.WorkQueuePolicy
	outcomes := s(messages.StreamOutcomes, "outcomes", "Internal: tool outcomes from skill workers (work queue)")
	outcomes.Retention = jetstream.WorkQueuePolicy
	return []jetstream.StreamConfig{prompts, narrations, plans, results, events, jobs, outcomes}
}

// BucketConfigs returns the configuration of every KV bucket of the product.
func (c Config) BucketConfigs() []jetstream.KeyValueConfig {
	c = c.WithDefaults()
	storage := jetstream.FileStorage
	if c.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	b := func(name, desc string, history uint8) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: name, Description: desc, History: history, Storage: storage, Replicas: c.Replicas}
	}
	prompts := b(messages.BucketPrompts, "Internal: narrations of recent prompts by <session>.<promptId>, for dedupe", 1)
	prompts.TTL = c.PromptDedupeTTL
	return []jetstream.KeyValueConfig{
		b(messages.BucketSessions, "Session state, key <session>", 5),
		b(messages.BucketHealth, "Skill health, key <session>.<skill>", 5),
		b(messages.BucketSkills, "Skill registry, key <skill>", 1),
		b(messages.BucketPlans, "Internal: scheduler state of in-flight plans", 1),
		prompts,
	}
}

// Provision creates or updates every stream and bucket. It is idempotent and
// safe to run from several components at once.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	for _, sc := range c.StreamConfigs() {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	for _, kc := range c.BucketConfigs() {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			// A concurrent creator may win the race; the bucket then exists.
			if errors.Is(err, jetstream.ErrBucketExists) {
				continue
			}
			return fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
		}
	}
	return nil
}
