package skillworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/pkg/messages"
)

// casRetries bounds optimistic-concurrency retries on one registry key.
const casRetries = 20

// register adds or refreshes this worker in the skill's registry entry,
// updating the skill's description from sk (compare-and-set on the KV
// revision, so concurrent workers never drop each other).
func (w *Worker) register(ctx context.Context, sk *skills.Skill) error {
	return w.updateEntry(ctx, sk.Name, func(e *messages.RegistryEntry) bool {
		fillEntry(e, sk)
		e.Workers[w.cfg.ID] = messages.WorkerInfo{ID: w.cfg.ID, Host: hostname(), PID: os.Getpid(),
			Concurrency: w.cfg.Concurrency, LastSeen: time.Now().UTC(), Running: int(w.inFlight.Load())}
		w.pruneWorkers(e)
		return true
	})
}

// unregister removes this worker from the skill's entry; the entry stays
// (with no live worker) so the planner can tell the skill is unserved.
func (w *Worker) unregister(ctx context.Context, name string) {
	err := w.updateEntry(ctx, name, func(e *messages.RegistryEntry) bool {
		if _, ok := e.Workers[w.cfg.ID]; !ok {
			return false
		}
		delete(e.Workers, w.cfg.ID)
		return true
	})
	if err != nil {
		w.log.Warn("skillworker: could not leave the registry", slog.String("skill", name), slog.Any("error", err))
	}
}

func (w *Worker) pruneWorkers(e *messages.RegistryEntry) {
	now := time.Now()
	for id, wi := range e.Workers {
		if id != w.cfg.ID && now.Sub(wi.LastSeen) > 3*w.cfg.WorkerTTL {
			delete(e.Workers, id)
		}
	}
}

func fillEntry(e *messages.RegistryEntry, sk *skills.Skill) {
	sk.FillEntry(e)
}

// updateEntry applies fn to the entry of key name with compare-and-set,
// retrying on conflicts. fn returns false to leave the entry unchanged.
func (w *Worker) updateEntry(ctx context.Context, name string, fn func(*messages.RegistryEntry) bool) error {
	kv, err := w.registryKV(ctx)
	if err != nil {
		return err
	}
	for range casRetries {
		var e messages.RegistryEntry
		var rev uint64
		cur, err := kv.Get(ctx, name)
		switch {
		case err == nil:
			rev = cur.Revision()
			if jerr := json.Unmarshal(cur.Value(), &e); jerr != nil {
				w.log.Warn("skillworker: registry entry unreadable; rewriting it", slog.String("skill", name), slog.Any("error", jerr))
				e = messages.RegistryEntry{}
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return fmt.Errorf("read registry entry %s: %w", name, err)
		}
		if e.Workers == nil {
			e.Workers = map[string]messages.WorkerInfo{}
		}
		if !fn(&e) {
			return nil
		}
		data := encodeJSON(&e)
		if rev == 0 {
			_, err = kv.Create(ctx, name, data)
		} else {
			_, err = kv.Update(ctx, name, data, rev)
		}
		if err == nil {
			return nil
		}
		if !bus.IsConflict(err) {
			return fmt.Errorf("write registry entry %s: %w", name, err)
		}
	}
	return fmt.Errorf("write registry entry %s: too many concurrent updates", name)
}

// registryKV returns the skills bucket, opened at the first call and
// kept: a bucket handle is names only and survives reconnects and leader
// elections, while opening it asks the stream's leader for its info.
func (w *Worker) registryKV(ctx context.Context) (jetstream.KeyValue, error) {
	if kv := w.registry.Load(); kv != nil {
		return *kv, nil
	}
	kv, err := w.js.KeyValue(ctx, messages.BucketSkills)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", messages.BucketSkills, err)
	}
	w.registry.Store(&kv)
	return kv, nil
}

// heartbeat refreshes the worker's registry entries until the worker stops.
func (w *Worker) heartbeat() {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-w.fetchCtx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		list := make([]*skills.Skill, 0, len(w.served))
		for _, s := range w.served {
			list = append(list, s.skill)
		}
		w.mu.Unlock()
		for _, sk := range list {
			ctx, cancel := context.WithTimeout(w.fetchCtx, w.cfg.Heartbeat)
			if err := w.register(ctx, sk); err != nil && w.fetchCtx.Err() == nil {
				w.log.Warn("skillworker: heartbeat failed", slog.String("skill", sk.Name), slog.Any("error", err))
			}
			cancel()
		}
	}
}
