// Package app is the common life of a long-running component process: load
// the configuration, connect to NATS, serve /metrics, /healthz and /readyz,
// start the component, wait for SIGINT/SIGTERM, stop it gracefully.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/ops"
	"github.com/narratoria/runtime/internal/tracing"
)

// Component is anything with the actor life of STYLE.md.
type Component interface {
	// Start starts the component; it returns once it is serving.
	Start(ctx context.Context) error
	// Stop stops it gracefully; idempotent.
	Stop()
	// Ready reports nil when it is serving.
	Ready() error
}

// Env is what a component is built from.
type Env struct {
	// Config is the loaded configuration.
	Config config.File
	// Log is the process logger.
	Log *slog.Logger
	// NC is the NATS connection.
	NC *nats.Conn
	// Registry receives Prometheus collectors.
	Registry prometheus.Registerer
}

// Run loads the configuration, connects, builds the component with build,
// runs it until ctx ends or a signal arrives, and stops it. name is the
// component name used in logs and as the NATS connection name.
func Run(ctx context.Context, name string, cfg config.File, build func(Env) (Component, error)) error {
	log := cfg.Logger().With(slog.String("component", name))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	shutdownTracing, err := tracing.Setup(ctx, cfg.OTel, "narratoria-"+name, bus.VersionDefault)
	if err != nil {
		return fmt.Errorf("%s: tracing: %w", name, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	natsCfg := cfg.NATS
	if natsCfg.Name == "" {
		natsCfg.Name = name
	}
	nc, err := bus.Connect(ctx, natsCfg, log)
	if err != nil {
		return err
	}
	defer nc.Close()

	reg := ops.NewRegistry()
	probes := ops.NewProbes()
	probes.Live("nats", func() error {
		if nc.IsClosed() {
			return errors.New("NATS connection closed")
		}
		return nil
	})
	comp, err := build(Env{Config: cfg, Log: log, NC: nc, Registry: reg})
	if err != nil {
		return err
	}
	probes.Ready(name, comp.Ready)
	addr, err := ops.Serve(ctx, cfg.Metrics.Addr, reg, probes, log)
	if err != nil {
		return err
	}
	if err := comp.Start(ctx); err != nil {
		return fmt.Errorf("%s: start: %w", name, err)
	}
	log.Info(name+": running", slog.String("nats", nc.ConnectedUrlRedacted()), slog.String("metrics", addr))
	<-ctx.Done()
	log.Info(name + ": signal received, shutting down")
	comp.Stop()
	if err := nc.Drain(); err != nil {
		log.Warn(name+": drain", slog.Any("error", err))
	}
	return nil
}

// Main is the whole main of a component command: it parses the common
// flags (--config, --nats-url, --metrics-addr, --version, --help) plus
// the ones extra adds, in the style of the narratoria CLI (GNU long
// flags: --flag value or --flag=value), loads the configuration, applies
// the flags, and runs the component. It returns the process exit code: 0
// after --version or --help, 2 for bad flags or configuration, 1 when the
// component fails.
func Main(name string, args []string, extra func(fs *pflag.FlagSet) func(*config.File), build func(Env) (Component, error)) int {
	return MainTo(name, args, os.Stdout, os.Stderr, extra, build)
}

// MainTo is Main writing to out and errOut.
func MainTo(name string, args []string, out, errOut io.Writer, extra func(fs *pflag.FlagSet) func(*config.File), build func(Env) (Component, error)) int {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(errOut)
	cfgPath := fs.String("config", "", "YAML configuration file (see config/narratoria.yaml)")
	url := fs.String("nats-url", "", "NATS server URL(s) (env NARRATORIA_NATS_URL; default nats://127.0.0.1:4222)")
	metrics := fs.String("metrics-addr", "", "listen address for /metrics, /healthz, /readyz (e.g. :9091; default off)")
	version := fs.Bool("version", false, "print the version (the one the component's NATS micro service reports) and exit")
	apply := func(*config.File) {}
	if extra != nil {
		apply = extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(errOut, "%s: %v (see '%s --help')\n", name, err, name)
		return 2
	}
	if *version {
		PrintVersion(out, name)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "%s: unexpected argument %q (see '%s --help')\n", name, fs.Arg(0), name)
		return 2
	}
	cfg, err := config.Load(*cfgPath, nil)
	if err != nil {
		fmt.Fprintln(errOut, name+":", err)
		return 2
	}
	if *url != "" {
		cfg.NATS.URL = *url
	}
	if *metrics != "" {
		cfg.Metrics.Addr = *metrics
	}
	apply(&cfg)
	if err := Run(context.Background(), name, cfg, build); err != nil {
		fmt.Fprintln(errOut, name+":", err)
		return 1
	}
	return 0
}

// PrintVersion prints what every binary's --version prints: its name and
// the build version, the one its NATS micro service reports
// (bus.ServiceVersion).
func PrintVersion(w io.Writer, name string) {
	fmt.Fprintf(w, "%s version %s\n", name, bus.ServiceVersion(""))
}
