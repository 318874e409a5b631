// Command skillworker serves tool jobs for the skills in a folder: it
// registers them in the registry, pulls their jobs from JetStream, runs each
// script as a process and reports the outcome. Run as many as you need; the
// workers serving one skill share its jobs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/skillworker"
)

func main() {
	fs := flag.NewFlagSet("skillworker", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML configuration file (see config/narratoria.yaml)")
	url := fs.String("nats-url", "", "NATS server URL(s) (env NARRATORIA_NATS_URL; default nats://127.0.0.1:4222)")
	dir := fs.String("skills-dir", "", "skills folder (default ./skills)")
	only := fs.String("skills", "", "serve only these skills, comma-separated (default all)")
	conc := fs.Int("concurrency", 0, "scripts run at once (default: number of CPU cores)")
	metrics := fs.String("metrics-addr", "", "listen address for /metrics, /healthz, /readyz (e.g. :9093; default off)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg, err := config.Load(*cfgPath, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skillworker:", err)
		os.Exit(2)
	}
	if *url != "" {
		cfg.NATS.URL = *url
	}
	if *dir != "" {
		cfg.Worker.SkillsDir = *dir
	}
	if *only != "" {
		cfg.Worker.Skills = strings.Split(*only, ",")
	}
	if *conc != 0 {
		cfg.Worker.Concurrency = *conc
	}
	if *metrics != "" {
		cfg.Metrics.Addr = *metrics
	}
	err = app.Run(context.Background(), "skillworker", cfg, func(env app.Env) (app.Component, error) {
		return skillworker.New(env.NC, env.Config.Worker, skillworker.Options{
			Logger: env.Log, Registerer: env.Registry, Bus: env.Config.NATS,
		})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "skillworker:", err)
		os.Exit(1)
	}
}
