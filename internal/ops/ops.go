// Package ops serves what an operator scrapes and probes on every
// component: Prometheus metrics on /metrics, liveness on /healthz and
// readiness on /readyz.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Check reports nil when the thing it checks is fine.
type Check func() error

// Probes holds the named checks behind /healthz and /readyz. Components add
// theirs as they start. It is safe for concurrent use.
type Probes struct {
	mu    sync.Mutex
	live  map[string]Check
	ready map[string]Check
}

// NewProbes returns empty probes (healthy and ready until checks are added).
func NewProbes() *Probes {
	return &Probes{live: map[string]Check{}, ready: map[string]Check{}}
}

// Live adds a liveness check.
func (p *Probes) Live(name string, c Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[name] = c
}

// Ready adds a readiness check.
func (p *Probes) Ready(name string, c Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready[name] = c
}

func (p *Probes) run(checks map[string]Check) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for name, c := range checks {
		if err := c(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (p *Probes) handler(checks map[string]Check) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := p.run(checks); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Handler returns the mux serving /metrics, /healthz and /readyz.
func Handler(g prometheus.Gatherer, p *Probes) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", p.handler(p.live))
	mux.Handle("/readyz", p.handler(p.ready))
	return mux
}

// Serve listens on addr (e.g. ":9090"; empty disables it) and serves Handler
// until ctx ends. It returns the bound address (useful with port 0).
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, p *Probes, log *slog.Logger) (string, error) {
	if addr == "" {
		return "", nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: Handler(g, p), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ops: metrics server stopped", slog.Any("error", err))
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), nil
}
