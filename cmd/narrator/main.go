// Command narrator turns prompts into narrations: it takes prompts from
// NARRATORIA_PROMPTS and narratoria.narrate, plans them into skill scripts,
// has the scheduler run them, replans on failure and publishes the
// narration.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/narrator"
)

func main() {
	fs := flag.NewFlagSet("narrator", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML configuration file (see config/narratoria.yaml)")
	url := fs.String("nats-url", "", "NATS server URL(s) (env NARRATORIA_NATS_URL; default nats://127.0.0.1:4222)")
	metrics := fs.String("metrics-addr", "", "listen address for /metrics, /healthz, /readyz (e.g. :9092; default off)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg, err := config.Load(*cfgPath, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "narrator:", err)
		os.Exit(2)
	}
	if *url != "" {
		cfg.NATS.URL = *url
	}
	if *metrics != "" {
		cfg.Metrics.Addr = *metrics
	}
	err = app.Run(context.Background(), "narrator", cfg, func(env app.Env) (app.Component, error) {
		return narrator.New(env.NC, env.Config.Narrator, narrator.Options{Logger: env.Log, Registerer: env.Registry, Bus: env.Config.NATS})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "narrator:", err)
		os.Exit(1)
	}
}
