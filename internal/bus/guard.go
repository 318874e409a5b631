package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// GuardInterval is how often a Guard checks what its component needs.
const GuardInterval = 2 * time.Second

// usageWarn is the fill ratio of a stream or bucket at which a Guard warns.
const usageWarn = 0.9

// Guard keeps what a component needs in JetStream there: it checks its
// streams and buckets every GuardInterval, recreates a missing one when
// the configuration says provision "auto" (else logs it and reports the
// component unready until an operator provisions it), and reports each
// one's fill ratio against its size limit, warning once above 90%.
type Guard struct {
	js      jetstream.JetStream
	cfg     Config
	log     *slog.Logger
	streams []jetstream.StreamConfig
	usage   *prometheus.GaugeVec
	healed  *prometheus.CounterVec

	mu      sync.Mutex
	missing []string
	warned  map[string]bool

	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// NewGuard watches the named streams and buckets (bucket names without
// "KV_"), provisioned as c says. reg may be nil.
func NewGuard(js jetstream.JetStream, c Config, streams, buckets []string, component string, reg prometheus.Registerer, log *slog.Logger) *Guard {
	c = c.WithDefaults()
	g := &Guard{js: js, cfg: c, log: log, warned: map[string]bool{},
		usage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "narratoria_jetstream_usage_ratio",
			Help:        "Bytes stored in each stream or bucket the component uses, over its size limit (nats.streamMaxBytes, nats.bucketMaxBytes). At 1 history streams drop their oldest messages and the others refuse new ones.",
			ConstLabels: prometheus.Labels{"component": component},
		}, []string{"stream"}),
		healed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "narratoria_jetstream_recreated_total",
			Help:        "Streams and buckets found missing, by whether the component recreated them (recreated) or waits for an operator (missing).",
			ConstLabels: prometheus.Labels{"component": component},
		}, []string{"stream", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(g.usage, g.healed)
	}
	for _, sc := range c.StreamConfigs() {
		if slices.Contains(streams, sc.Name) {
			g.streams = append(g.streams, sc)
		}
	}
	for _, kc := range c.BucketConfigs() {
		if slices.Contains(buckets, kc.Bucket) {
			g.streams = append(g.streams, kvStreamConfig(kc))
		}
	}
	return g
}

// kvStreamConfig is the stream nats.go makes for a bucket, as far as a
// Guard needs it (its name, and the bucket's config to recreate it).
func kvStreamConfig(kc jetstream.KeyValueConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: KVStream(kc.Bucket), Description: kc.Description, MaxBytes: kc.MaxBytes,
		Metadata: map[string]string{"bucket": kc.Bucket}}
}

// Check makes one pass: every stream and bucket is looked up; a missing
// one is recreated (provision auto) or recorded as missing. It returns an
// error naming what is missing afterwards.
func (g *Guard) Check(ctx context.Context) error {
	var missing []string
	for _, sc := range g.streams {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := g.info(cctx, sc.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) && g.cfg.Provision == ProvisionAuto {
			if err = g.create(cctx, sc); err == nil {
				g.healed.WithLabelValues(sc.Name, "recreated").Inc()
				g.log.Warn("jetstream: recreated a missing stream or bucket", slog.String("stream", sc.Name))
				info, err = g.info(cctx, sc.Name)
			}
		}
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			missing = append(missing, sc.Name)
			g.healed.WithLabelValues(sc.Name, "missing").Inc()
			g.log.Error("jetstream: a stream or bucket this component needs is missing; run `narratoria provision` as an operator",
				slog.String("stream", sc.Name), slog.String("provision", g.cfg.Provision))
			continue
		case err != nil:
			if ctx.Err() == nil {
				g.log.Warn("jetstream: cannot check a stream", slog.String("stream", sc.Name), slog.Any("error", err))
			}
			continue
		}
		if bucket, ok := sc.Metadata["bucket"]; ok {
			if problem := bucketMisfit(bucket, info.Config); problem != "" {
				// The scheduler's plan state would not survive a restart as
				// written (a tool log keeping only its last message).
				missing = append(missing, sc.Name+" ("+problem+")")
				g.log.Error("jetstream: a bucket is provisioned for an earlier version; run `narratoria provision` as an operator",
					slog.String("stream", sc.Name), slog.String("problem", problem))
			}
		}
		if sc.SubjectTransform != nil && !sameTransform(info.Config.SubjectTransform, sc.SubjectTransform) {
			// Sessions would be routed to partitions this component does
			// not expect: nothing of that stream would be consumed right.
			missing = append(missing, sc.Name+" (partitioned differently: nats.partitions must match the provisioned streams)")
			g.log.Error("jetstream: a stream is partitioned differently from this component's nats.partitions; run `narratoria provision` with the same setting",
				slog.String("stream", sc.Name), slog.Int("partitions", g.cfg.Partitions))
		}
		g.observe(sc.Name, info)
	}
	g.mu.Lock()
	g.missing = missing
	g.mu.Unlock()
	if len(missing) > 0 {
		return fmt.Errorf("missing in JetStream: %s (run `narratoria provision`)", strings.Join(missing, ", "))
	}
	return nil
}

func (g *Guard) info(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	st, err := g.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return st.CachedInfo(), nil
}

func (g *Guard) create(ctx context.Context, sc jetstream.StreamConfig) error {
	if bucket, ok := sc.Metadata["bucket"]; ok {
		for _, kc := range g.cfg.BucketConfigs() {
			if kc.Bucket == bucket {
				_, err := provisionBucket(ctx, g.js, kc)
				return err
			}
		}
	}
	return provisionStream(ctx, g.js, sc)
}

// observe records a stream's fill ratio and warns once when it passes 90%.
func (g *Guard) observe(name string, info *jetstream.StreamInfo) {
	if info.Config.MaxBytes <= 0 {
		return
	}
	ratio := float64(info.State.Bytes) / float64(info.Config.MaxBytes)
	g.usage.WithLabelValues(name).Set(ratio)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case ratio >= usageWarn && !g.warned[name]:
		g.warned[name] = true
		discard := "new messages are refused"
		if info.Config.Discard == jetstream.DiscardOld {
			discard = "the oldest messages are dropped"
		}
		g.log.Warn("jetstream: a stream is near its size limit; at the limit "+discard,
			slog.String("stream", name), slog.Uint64("bytes", info.State.Bytes), slog.Int64("maxBytes", info.Config.MaxBytes))
	case ratio < usageWarn*0.9:
		g.warned[name] = false
	}
}

// Ready reports what is missing, nil when nothing is.
func (g *Guard) Ready() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.missing) > 0 {
		return fmt.Errorf("missing in JetStream: %s (run `narratoria provision`)", strings.Join(g.missing, ", "))
	}
	return nil
}

// Start checks every GuardInterval until Stop (or until the connection
// is closed).
func (g *Guard) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(GuardInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if g.js.Conn().IsClosed() {
					return // the component's connection is gone: so is the component
				}
				_ = g.Check(ctx)
			}
		}
	}()
}

// Stop ends the checks and waits for the current one. Idempotent.
func (g *Guard) Stop() {
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}

// Ensure is what a component does at start: provision "auto" creates and
// updates every stream and bucket (Provision); "check" only checks that
// the component's own exist (Check), naming any that is missing.
func (g *Guard) Ensure(ctx context.Context) error {
	if g.cfg.Provision == ProvisionAuto {
		return Provision(ctx, g.js, g.cfg)
	}
	return g.Check(ctx)
}
