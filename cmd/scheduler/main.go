// Command scheduler runs Narratoria plans: it takes Plan JSON from
// NARRATORIA_PLANS, runs each plan's tools on the skill workers and
// publishes the Execution Result. Run two for failover: one is active, the
// other takes over within seconds of its death.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/scheduler"
)

func main() {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML configuration file (see config/narratoria.yaml)")
	url := fs.String("nats-url", "", "NATS server URL(s) (env NARRATORIA_NATS_URL; default nats://127.0.0.1:4222)")
	metrics := fs.String("metrics-addr", "", "listen address for /metrics, /healthz, /readyz (e.g. :9091; default off)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg, err := config.Load(*cfgPath, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(2)
	}
	if *url != "" {
		cfg.NATS.URL = *url
	}
	if *metrics != "" {
		cfg.Metrics.Addr = *metrics
	}
	err = app.Run(context.Background(), "scheduler", cfg, func(env app.Env) (app.Component, error) {
		return scheduler.New(env.NC, env.Config.Scheduler, scheduler.Options{Logger: env.Log, Registerer: env.Registry, Bus: env.Config.NATS})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}
