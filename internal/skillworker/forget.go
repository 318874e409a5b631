package skillworker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/messages"
)

// forgetLater removes a skill whose files are gone from the registry, and
// its durable consumer from the jobs stream, once Config.SkillRemovalGrace
// has passed without any worker serving it again: a removed skill leaves
// the planners' catalogue and `narratoria skills` instead of staying listed
// without workers for ever. A worker that stops within the grace leaves
// it listed (without a live worker, as a stopped worker's skill is).
func (w *Worker) forgetLater(name string) {
	grace := w.cfg.SkillRemovalGrace
	if grace < 0 {
		return
	}
	w.life.Go(func(context.Context) {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.fetchCtx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(w.fetchCtx, 10*time.Second)
		defer cancel()
		if err := w.forget(ctx, name); err != nil && ctx.Err() == nil {
			w.log.Warn("skillworker: a removed skill could not leave the registry", slog.String("skill", name), slog.Any("error", err))
		}
	})
}

// forget removes a skill nobody serves: its registry entry (a delete that
// holds only if the entry did not change since it was read: a worker that
// registers it again meanwhile keeps it) and then its consumer. It does
// nothing while this worker or another live one serves the skill.
func (w *Worker) forget(ctx context.Context, name string) error {
	if _, serving := w.skill(name); serving {
		return nil
	}
	kv, err := w.registryKV(ctx)
	if err != nil {
		return err
	}
	e, err := kv.Get(ctx, name)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	if err == nil {
		var re messages.RegistryEntry
		if json.Unmarshal(e.Value(), &re) == nil && len(re.LiveWorkers(time.Now(), w.cfg.WorkerTTL)) > 0 {
			return nil // another worker serves it
		}
		if err := kv.Delete(ctx, name, jetstream.LastRevision(e.Revision())); err != nil {
			if bus.IsConflict(err) {
				return nil // registered again meanwhile
			}
			return err
		}
	}
	if err := w.js.DeleteConsumer(ctx, messages.StreamJobs, "skill-"+name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	w.log.Info("skillworker: removed skill left the registry with its consumer", slog.String("skill", name),
		slog.Duration("grace", w.cfg.SkillRemovalGrace))
	return nil
}
