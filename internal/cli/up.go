package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/console"
	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/ops"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/tenancy"
	"github.com/narratoria/runtime/internal/tracing"
)

// upOptions are the flags of `narratoria up`.
type upOptions struct {
	configPath string
	dataDir    string
	natsPort   int
	natsURL    string
	skillsDir  string
	// skillsDirSet says --skills-dir was given.
	skillsDirSet bool
	metricsPort  int
	consolePort  int
	readyFile    string
	// tenants runs the embedded server multi-tenant with these tenants.
	tenants []string
}

func newUpCmd(s Streams) *cobra.Command {
	o := upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run everything in one process: embedded NATS, scheduler, narrator and a skill worker",
		Long: `Run Narratoria in one process. By default it starts an embedded NATS server with
JetStream (files under --data-dir, listening on 127.0.0.1:--nats-port so the nats CLI
and game servers can connect), then the scheduler, the narrator and a skill worker
for --skills-dir. With --nats-url it runs the components against that server instead.
Ctrl-C stops it cleanly; running it again on the same data dir resumes where it stopped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.skillsDirSet = cmd.Flags().Changed("skills-dir")
			return runUp(cmd.Context(), s, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.configPath, "config", "", "YAML configuration file (see config/narratoria.yaml)")
	f.StringVar(&o.dataDir, "data-dir", "./data", "where the embedded NATS server keeps JetStream's files")
	f.IntVar(&o.natsPort, "nats-port", embedded.PortDefault, "port of the embedded NATS server on 127.0.0.1")
	f.StringVar(&o.natsURL, "nats-url", "", "use this NATS server instead of the embedded one")
	f.StringVar(&o.skillsDir, "skills-dir", "./skills", "skills folder served by the skill worker")
	f.IntVar(&o.metricsPort, "metrics-port", 9090, "port of /metrics, /healthz and /readyz on 127.0.0.1 (0 disables)")
	f.IntVar(&o.consolePort, "console-port", 7420, "port of the web console on 127.0.0.1 (0 disables, -1 any free port)")
	f.StringSliceVar(&o.tenants, "tenants", nil, "run multi-tenant (NATS accounts) with these tenants, writing <data-dir>/tenants/<name>.creds for their game servers; `narratoria tenant add` adds more while it runs")
	f.StringVar(&o.readyFile, "ready-file", "", "write the NATS URL and the console URL (one per line; with --tenants, then each tenant's console) to this file once everything runs (for scripts and tests)")
	return cmd
}

func runUp(parent context.Context, s Streams, o upOptions) error {
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.Load(o.configPath, nil)
	if err != nil {
		return usageErr("%v", err)
	}
	log := cfg.Logger()
	shutdownTracing, err := tracing.Setup(ctx, cfg.OTel, "narratoria", bus.VersionDefault)
	if err != nil {
		return failErr("tracing: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	// The embedded server runs unless a server is named (flag, config file
	// or NARRATORIA_NATS_URL).
	url := o.natsURL
	if url == "" {
		url = cfg.NATS.URL
	}
	if len(o.tenants) > 0 && url != "" {
		return usageErr("--tenants runs the embedded server multi-tenant; with another server, configure it from deploy/README.md (\"Tenants\") and use `narratoria tenant`")
	}
	var tenantCreds []string
	if url == "" {
		dir, err := filepath.Abs(o.dataDir)
		if err != nil {
			return usageErr("--data-dir: %v", err)
		}
		eo := embedded.Options{Port: o.natsPort, StoreDir: filepath.Join(dir, "jetstream"), Mappings: bus.DoorMappings(cfg.NATS.WithDefaults().Prefix)}
		if len(o.tenants) > 0 {
			auth, err := tenancy.Open(dir, cfg.NATS.WithDefaults().Prefix)
			if err != nil {
				return failErr("%v", err)
			}
			for _, t := range o.tenants {
				creds, err := auth.AddTenant(t, tenancy.Limits{})
				if err != nil {
					return usageErr("--tenants: %v", err)
				}
				tenantCreds = append(tenantCreds, creds)
			}
			eo.Configure = auth.Configure
			cfg.NATS.Tenants = true
			cfg.NATS.CredsFile = auth.ServiceCreds()
		}
		srv, err := embedded.Start(eo)
		if err != nil {
			return failErr("%v", err)
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
	}
	cfg.NATS.URL = url
	busCfg := cfg.NATS
	busCfg.Name = "narratoria-up"
	nc, err := bus.Connect(ctx, busCfg, log)
	if err != nil {
		return failErr("%v", err)
	}
	defer nc.Close()
	if len(o.tenants) > 0 {
		// Each tenant's state stream, as `narratoria tenant add` makes it.
		js, err := jetstream.New(nc)
		if err != nil {
			return failErr("%v", err)
		}
		for _, t := range o.tenants {
			if err := bus.ProvisionTenant(ctx, js, busCfg, t, 0); err != nil {
				return failErr("%v", err)
			}
		}
	}

	reg := ops.NewRegistry()
	probes := ops.NewProbes()
	// The sample skills' wrappers fall back to this binary when the sample
	// skills binary was not built (a first `go run ./cmd/narratoria up`).
	if _, set := os.LookupEnv(runner.SkillsBinEnv); !set {
		if exe, err := os.Executable(); err == nil {
			_ = os.Setenv(runner.SkillsBinEnv, exe)
		}
	}
	// The flag wins when given; otherwise the configuration's folder (file
	// or NARRATORIA_WORKER_SKILLSDIR), else the flag's default.
	if o.skillsDirSet || cfg.Worker.SkillsDir == "" {
		cfg.Worker.SkillsDir = o.skillsDir
	}
	if st, err := os.Stat(cfg.Worker.SkillsDir); err != nil || !st.IsDir() {
		log.Warn("up: skills folder not found; the worker serves no skill until it appears", slog.String("skillsDir", cfg.Worker.SkillsDir))
	}
	comps, err := buildComponents(nc, cfg, log, reg)
	if err != nil {
		return failErr("%v", err)
	}
	for _, c := range comps {
		probes.Ready(c.name, c.comp.Ready)
	}
	metricsAddr := ""
	if o.metricsPort > 0 {
		if metricsAddr, err = ops.Serve(ctx, fmt.Sprintf("127.0.0.1:%d", o.metricsPort), reg, probes, log); err != nil {
			return failErr("%v", err)
		}
	}
	started := 0
	defer func() {
		for i := started - 1; i >= 0; i-- {
			comps[i].comp.Stop()
		}
	}()
	for _, c := range comps {
		if err := c.comp.Start(ctx); err != nil {
			return failErr("start %s: %v", c.name, err)
		}
		started++
	}
	// Who may sign in to the console(s): the configuration's users, else
	// the operator login up keeps in its data dir (made at the first start).
	logins, err := loginsOf(cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	logins.reg = reg
	loginLine := ""
	if o.consolePort != 0 && !cfg.Console.Configured() {
		dir, err := filepath.Abs(o.dataDir)
		if err != nil {
			return usageErr("--data-dir: %v", err)
		}
		u, password, created, err := upLogin(dir)
		if err != nil {
			return failErr("%v", err)
		}
		logins.users = []console.User{u}
		_, passwordFile := upLoginFiles(dir)
		loginLine = fmt.Sprintf("  console login: %s, password in %s (no console users configured)\n", u.Name, passwordFile)
		if created {
			loginLine = fmt.Sprintf("  console login: %s, password %s (shown once; also in %s)\n", u.Name, password, passwordFile)
		}
	}
	consoleURL := "disabled (--console-port 0)"
	var tenantConsoles []string
	if cfg.NATS.Tenants {
		consoleURL = "one per tenant, below"
		if o.consolePort == 0 {
			consoleURL = "disabled (--console-port 0)"
		}
	}
	// With tenants each tenant gets a console of its own, connected with
	// its credentials: it shows and acts on that tenant's sessions only,
	// as the tenant's game servers do.
	for i, creds := range tenantCreds {
		if o.consolePort == 0 {
			break
		}
		tc := busCfg
		tc.Tenants, tc.CredsFile, tc.Name = false, creds, "narratoria-console-"+o.tenants[i]
		tnc, err := bus.Connect(ctx, tc, log)
		if err != nil {
			return failErr("console of tenant %s: %v", o.tenants[i], err)
		}
		defer tnc.Close()
		port := max(o.consolePort, 0)
		if port > 0 {
			port += i
		}
		tl := logins
		if tl.auditJS, err = jetstream.New(nc); err != nil {
			return failErr("%v", err)
		}
		tl.tenant = o.tenants[i]
		curl, _, err := serveConsole(ctx, tnc, cfg.NATS.Prefix, fmt.Sprintf("127.0.0.1:%d", port), nil, tl, log)
		if err != nil {
			return failErr("%v", err)
		}
		tenantConsoles = append(tenantConsoles, curl)
	}
	if o.consolePort != 0 && !cfg.NATS.Tenants {
		curl, _, err := serveConsole(ctx, nc, cfg.NATS.Prefix, fmt.Sprintf("127.0.0.1:%d", max(o.consolePort, 0)), nil, logins, log)
		if err != nil {
			return failErr("%v", err)
		}
		consoleURL = curl
	}
	fmt.Fprintf(s.Out, `Narratoria is running.
  NATS:    %s
  console: %s
%s  metrics: http://%s/metrics
Try, in another terminal:
  go run ./cmd/narratoria prompt --session demo "I roll to pick the lock"
  go run ./cmd/narratoria watch --session demo
  go run ./cmd/narratoria skills
Press Ctrl-C to stop.
`, url, consoleURL, loginLine, metricsAddr)
	for i, creds := range tenantCreds {
		fmt.Fprintf(s.Out, "Tenant %s: add --creds %s to the commands above.\n", o.tenants[i], creds)
		if i < len(tenantConsoles) {
			fmt.Fprintf(s.Out, "  its console: %s\n", tenantConsoles[i])
		}
	}
	if o.readyFile != "" {
		lines := url + "\n" + consoleURL + "\n"
		for _, c := range tenantConsoles {
			lines += c + "\n"
		}
		if err := os.WriteFile(o.readyFile, []byte(lines), 0o644); err != nil {
			log.Warn("up: cannot write ready file", slog.Any("error", err))
		}
	}
	<-ctx.Done()
	fmt.Fprintln(s.Out, "Stopping…")
	return nil
}

type namedComponent struct {
	name string
	comp interface {
		Start(context.Context) error
		Stop()
		Ready() error
	}
}

// buildComponents builds the scheduler, the skill worker and the narrator,
// in the order they start (and the reverse of the order they stop).
func buildComponents(nc *nats.Conn, cfg config.File, log *slog.Logger, reg prometheus.Registerer) ([]namedComponent, error) {
	sch, err := scheduler.New(nc, cfg.Scheduler, scheduler.Options{Logger: log.With(slog.String("component", "scheduler")), Registerer: reg, Bus: cfg.NATS})
	if err != nil {
		return nil, err
	}
	wk, err := skillworker.New(nc, cfg.Worker, skillworker.Options{Logger: log.With(slog.String("component", "skillworker")), Registerer: reg, Bus: cfg.NATS})
	if err != nil {
		return nil, err
	}
	nar, err := narrator.New(nc, cfg.Narrator, narrator.Options{Logger: log.With(slog.String("component", "narrator")), Registerer: reg, Bus: cfg.NATS})
	if err != nil {
		return nil, err
	}
	return []namedComponent{{"scheduler", sch}, {"skillworker", wk}, {"narrator", nar}}, nil
}
