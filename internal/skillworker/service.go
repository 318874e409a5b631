package skillworker

import (
	"fmt"

	"github.com/nats-io/nats.go/micro"
)

// ServiceName is the worker's NATS micro service name.
const ServiceName = "narratoria-skillworker"

// startService registers the micro service: `nats micro ls` lists every
// worker, `nats micro stats` shows its jobs, errors and average time, and
// the "status" endpoint answers with the same figures.
func (w *Worker) startService() error {
	svc, err := micro.AddService(w.nc, micro.Config{
		Name:        ServiceName,
		Version:     w.opts.Version,
		Description: "Runs skill scripts for Narratoria plans",
		Metadata:    map[string]string{"worker": w.cfg.ID},
		StatsHandler: func(*micro.Endpoint) any {
			return w.Stats()
		},
	})
	if err != nil {
		return fmt.Errorf("skillworker: micro service: %w", err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) {
		_ = r.RespondJSON(w.Stats())
	}), micro.WithEndpointSubject(w.subj.Prefix+".skillworker."+w.cfg.ID+".status"))
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("skillworker: micro endpoint: %w", err)
	}
	w.svc = svc
	return nil
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	s := w.m.stats()
	s.InFlight = int(w.inFlight.Load())
	s.Skills = w.Skills()
	return s
}
