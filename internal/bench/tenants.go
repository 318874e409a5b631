package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/tenancy"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// figure11 measures tenant isolation (issue 28): acme's narrate latency
// alone, then while globex floods the deployment far over its prompt rate
// (narrator.tenantPromptRate, 5 per second: acme sends 4) from 4
// connections, on one multi-tenant
// deployment (operator mode, an account per tenant, everything in this
// process on an embedded server). The ratio is acme's p99 flooded to its
// p99 alone, measured in the same run.
func (e *env) figure11(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "narratoria-bench-tenants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	auth, err := tenancy.Open(filepath.Join(dir, "auth"), messages.SubjectPrefixDefault)
	if err != nil {
		return err
	}
	creds := map[string]string{}
	for _, t := range []string{"acme", "globex"} {
		if creds[t], err = auth.AddTenant(t, tenancy.Limits{}); err != nil {
			return err
		}
	}
	srv, err := embedded.Start(embedded.Options{Port: -1, StoreDir: filepath.Join(dir, "js"), Configure: auth.Configure})
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	skills := filepath.Join(dir, "skills", "echo")
	if err := writeEchoSkill(skills); err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	cfg := bus.Config{URL: srv.ClientURL(), CredsFile: auth.ServiceCreds(), Tenants: true}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	connect := func() (*nats.Conn, error) { return bus.Connect(ctx, cfg, log) }
	type component interface {
		Start(context.Context) error
		Stop()
	}
	start := func(c component, err error) error {
		if err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		stops = append(stops, c.Stop)
		return nil
	}
	conns := make([]*nats.Conn, 3)
	for i := range conns {
		if conns[i], err = connect(); err != nil {
			return err
		}
		defer conns[i].Close()
	}
	if err := start(skillworker.New(conns[0], skillworker.Config{SkillsDir: filepath.Dir(skills), WatchInterval: -1}, skillworker.Options{Logger: log, Bus: cfg})); err != nil {
		return err
	}
	sch, err := scheduler.New(conns[1], scheduler.Config{}, scheduler.Options{Logger: log, Bus: cfg})
	if err := start(sch, err); err != nil {
		return err
	}
	for !sch.OwnsAll() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := start(narrator.New(conns[2], narrator.Config{TenantPromptRate: 5, TenantPromptBurst: 5}, narrator.Options{Logger: log, Bus: cfg})); err != nil {
		return err
	}
	tenant := func(name string) (*client.Client, error) {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserCredentials(creds[name]))
		if err != nil {
			return nil, err
		}
		stops = append(stops, nc.Close)
		return client.New(nc)
	}
	acme, err := tenant("acme")
	if err != nil {
		return err
	}
	n := e.iterations(40, 200)
	measure := func(label string) (sample, error) {
		var s sample
		// acme sends 4 prompts a second, under the rate every tenant has.
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := range n + 5 {
			<-tick.C
			t0 := time.Now()
			nar, err := acme.Narrate(ctx, messages.Prompt{SessionID: fmt.Sprintf("acme-%d", i%8), Text: "hello there"})
			if err != nil {
				return nil, fmt.Errorf("%s: acme narrate: %w", label, err)
			}
			if nar.Fallback {
				return nil, fmt.Errorf("%s: acme's prompt narrated without its tool", label)
			}
			if i >= 5 { // warm-up
				s = append(s, time.Since(t0))
			}
		}
		return s, nil
	}
	alone, err := measure("alone")
	if err != nil {
		return err
	}
	fctx, stopFlood := context.WithCancel(ctx)
	var flood sync.WaitGroup
	var refused, narrated atomic.Int64
	for i := range 4 {
		globex, err := tenant("globex")
		if err != nil {
			stopFlood()
			return err
		}
		flood.Add(1)
		go func() {
			defer flood.Done()
			// 25 a second from each connection: 20 times globex's rate.
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for j := 0; fctx.Err() == nil; j++ {
				select {
				case <-fctx.Done():
					return
				case <-tick.C:
				}
				_, err := globex.Narrate(fctx, messages.Prompt{SessionID: fmt.Sprintf("flood-%d-%d", i, j%4), Text: "again and again"})
				var se *client.ServiceError
				switch {
				case errors.As(err, &se) && se.Code == "429":
					refused.Add(1)
				case err == nil:
					narrated.Add(1)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the flood is on
	flooded, err := measure("flooded")
	stopFlood()
	flood.Wait()
	if err != nil {
		return err
	}
	r := float64(flooded.p(0.99)) / float64(alone.p(0.99))
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("11 tenant isolation: acme's narrate (p50 / p99, %d prompts at 4/s) while globex floods from 4 connections at 100/s, 20× its rate (5/s)", n),
		Value:    ms(flooded.p(0.5)) + " / " + ms(flooded.p(0.99)),
		Baseline: "acme alone " + ms(alone.p(0.5)) + " / " + ms(alone.p(0.99)),
		Ratio:    fmt.Sprintf("%.2f×", r), Target: "p99 ≤ 1.5× (unchanged within noise)", Met: r <= 1.5,
		Note: fmt.Sprintf("globex: %d prompts refused (429), %d narrated", refused.Load(), narrated.Load())})
	return nil
}

// writeEchoSkill writes a one-script shell skill that answers at once.
func writeEchoSkill(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"skill.json": `{"name":"echo","version":"1.0.0","description":"echo","capabilities":["narration"],"scripts":[{"name":"say","path":"scripts/say"}]}`,
		"prompt.md":  "Echoes the player.",
		"scripts/say": `#!/bin/sh
cat > /dev/null
echo '{"version":"0","type":"done","ok":true,"output":{"narration":"An echo answers."}}'
`,
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if name == "scripts/say" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			return err
		}
	}
	return nil
}
