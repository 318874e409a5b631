package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	"github.com/narratoria/runtime/pkg/messages"
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
	// llmURL and llmModel name a model server for the planner and the
	// prose (--llm, --llm-model).
	llmURL, llmModel string
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
	f.IntVar(&o.consolePort, "console-port", 7420, "port of the web console on 127.0.0.1 (0 disables, -1 any free port); with --tenants the operator's across every tenant, and each tenant's on the ports after it")
	f.StringSliceVar(&o.tenants, "tenants", nil, "run multi-tenant (NATS accounts) with these tenants, writing <data-dir>/tenants/<name>.creds for their game servers; `narratoria tenant add` adds more while it runs")
	f.StringVar(&o.llmURL, "llm", "", "plan and write the prose with this OpenAI-compatible chat-completions server (e.g. http://127.0.0.1:8080/v1), streamed to the game; the rule planner and the template prose are the fallback (sets narrator.planner and narrator.prose to llm)")
	f.StringVar(&o.llmModel, "llm-model", "", "the model --llm serves, e.g. phi-3.5-mini-instruct (narrator.llm.model)")
	f.StringVar(&o.readyFile, "ready-file", "", "write the NATS URL and the console URL (one per line; with --tenants the operator's console, then each tenant's) to this file once everything runs (for scripts and tests)")
	return cmd
}

// writeReadyFile writes the NATS URL and the console URLs, one per line,
// to path once everything runs (nothing when path is empty). The file
// appears whole: it is written beside and renamed into place.
func writeReadyFile(path, url string, cons upConsoles, log *slog.Logger) {
	if path == "" {
		return
	}
	lines := url + "\n" + cons.url + "\n"
	for _, c := range cons.tenants {
		lines += c + "\n"
	}
	// Written beside and renamed into place: whoever waits for the file to
	// exist reads it whole.
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, []byte(lines), 0o644)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		log.Warn("up: cannot write ready file", slog.Any("error", err))
	}
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
	if err := o.applyLLM(&cfg); err != nil {
		return err
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
	url := cmp.Or(o.natsURL, cfg.NATS.URL)
	if len(o.tenants) > 0 && url != "" {
		return usageErr("--tenants runs the embedded server multi-tenant; with another server, configure it from deploy/README.md (\"Tenants\") and use `narratoria tenant`")
	}
	var emb *embeddedUp
	if url == "" {
		if emb, err = startEmbedded(o, &cfg); err != nil {
			return err
		}
		defer emb.stop()
		url = emb.srv.ClientURL()
	}
	cfg.NATS.URL = url
	busCfg := cfg.NATS
	busCfg.Name = "narratoria-up"
	nc, err := bus.Connect(ctx, busCfg, log)
	if err != nil {
		return failErr("%v", err)
	}
	defer nc.Close()
	var weights []int
	if emb != nil {
		weights = emb.weights
	}
	if err := provisionTenants(ctx, nc, busCfg, o.tenants, weights); err != nil {
		return err
	}
	reg := ops.NewRegistry()
	probes := ops.NewProbes()
	comps, err := upComponents(nc, &cfg, o, log, reg)
	if err != nil {
		return err
	}
	for _, c := range comps {
		probes.Ready(c.name, c.comp.Ready)
	}
	metricsAddr := "disabled (--metrics-port 0)"
	if o.metricsPort > 0 {
		addr, err := ops.Serve(ctx, fmt.Sprintf("127.0.0.1:%d", o.metricsPort), reg, probes, log)
		if err != nil {
			return failErr("%v", err)
		}
		metricsAddr = "http://" + addr + "/metrics"
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
	cons, err := serveUpConsoles(ctx, nc, busCfg, cfg, o, emb, log, reg)
	if err != nil {
		return err
	}
	printUp(s, o, url, metricsAddr, cons, emb)
	if n := cfg.Narrator; n.Planner == "llm" || n.Prose == "llm" {
		fmt.Fprintf(s.Out, "Model: %s at %s (planner: %s, prose: %s)\n", n.LLM.Model, n.LLM.BaseURL, cmp.Or(n.Planner, "rules"), cmp.Or(n.Prose, "template"))
	}
	writeReadyFile(o.readyFile, url, cons, log)
	<-ctx.Done()
	fmt.Fprintln(s.Out, "Stopping…")
	return nil
}

// applyLLM sets the narrator's planner and prose to the model server of
// --llm and --llm-model, which win over the configuration's.
func (o upOptions) applyLLM(cfg *config.File) error {
	if o.llmModel != "" && o.llmURL == "" {
		return usageErr("--llm-model needs --llm, the model server's URL")
	}
	if o.llmURL == "" {
		return nil
	}
	n := &cfg.Narrator
	n.Planner, n.Prose, n.LLM.BaseURL = "llm", "llm", o.llmURL
	if o.llmModel != "" {
		n.LLM.Model = o.llmModel
	}
	if n.LLM.Model == "" {
		return usageErr("--llm needs --llm-model (or narrator.llm.model): the model the server is to run")
	}
	return nil
}

// embeddedUp is up's embedded NATS server and the credentials it made.
type embeddedUp struct {
	srv *server.Server
	// clientCreds are the operator's clients' credentials (CLI, nats
	// CLI); gameCreds a game server's (the game role's permissions);
	// tenantCreds each tenant's, in --tenants order.
	clientCreds string
	gameCreds   string
	tenantCreds []string
	// weights are the tenants' weights (narratoria tenant add --weight),
	// in --tenants order.
	weights []int
}

func (e *embeddedUp) stop() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// startEmbedded starts the embedded server in operator mode: no client
// gets in without credentials, its listener on loopback included. The
// data folder (0700) keeps the authority's keys, the credentials it
// issues (0600) and the store; up's own components connect with the
// service's credentials, and cfg is set to use them.
func startEmbedded(o upOptions, cfg *config.File) (*embeddedUp, error) {
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return nil, usageErr("--data-dir: %v", err)
	}
	if err := privateDir(dir); err != nil {
		return nil, failErr("%v", err)
	}
	auth, err := tenancy.Open(dir, cfg.NATS.WithDefaults().Prefix)
	if err != nil {
		return nil, failErr("%v", err)
	}
	e := &embeddedUp{clientCreds: auth.ClientCreds()}
	// A single game's server connects with the game role's least
	// privilege, not the operator's credentials.
	if e.gameCreds, err = auth.GameCreds(); err != nil {
		return nil, failErr("%v", err)
	}
	for _, t := range o.tenants {
		creds, err := auth.AddTenant(t, tenancy.Limits{})
		if errors.Is(err, tenancy.ErrTenantRevoked) {
			return nil, usageErr("--tenants: tenant %s was removed (tenant rm): leave it out, or bring it back with `narratoria tenant add %s --auth-dir %s`", t, t, o.dataDir)
		}
		if err != nil {
			return nil, usageErr("--tenants: %v", err)
		}
		e.tenantCreds = append(e.tenantCreds, creds)
		w, err := auth.Weight(t)
		if err != nil {
			return nil, failErr("%v", err)
		}
		e.weights = append(e.weights, w)
	}
	store := filepath.Join(dir, "jetstream")
	if err := adoptGlobalStore(store, auth.ServicePublicKey()); err != nil {
		return nil, failErr("%v", err)
	}
	cfg.NATS.Tenants = len(o.tenants) > 0
	cfg.NATS.CredsFile = auth.ServiceCreds()
	cfg.NATS.User, cfg.NATS.Password, cfg.NATS.Token, cfg.NATS.NKeyFile = "", "", "", ""
	e.srv, err = embedded.Start(embedded.Options{Port: o.natsPort, StoreDir: store, Configure: auth.Configure})
	if err != nil {
		return nil, failErr("%v", err)
	}
	return e, nil
}

// privateDir makes dir (and its parents) if missing and closes it to
// everyone but its owner: it holds the store, keys and credentials.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	return nil
}

// adoptGlobalStore moves the JetStream files of an earlier up, which ran
// its server without accounts (the global account, "$G"), to the service
// account's folder, where the server in operator mode looks for them:
// streams, buckets and their messages are kept across the upgrade.
func adoptGlobalStore(store, svcPub string) error {
	old := filepath.Join(store, "jetstream", "$G")
	now := filepath.Join(store, "jetstream", svcPub)
	if _, err := os.Stat(old); err != nil {
		return nil
	}
	if _, err := os.Stat(now); err == nil {
		return nil // already adopted, or the service account has its own
	}
	if err := os.Rename(old, now); err != nil {
		return fmt.Errorf("adopt the store of an earlier up (%s): %w", old, err)
	}
	return nil
}

// provisionTenants makes each tenant's state stream, as `narratoria tenant
// add` makes it, with the tenant's weight (weights[i], kept by the
// authority) in its metadata.
func provisionTenants(ctx context.Context, nc *nats.Conn, busCfg bus.Config, tenants []string, weights []int) error {
	if len(tenants) == 0 {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return failErr("%v", err)
	}
	for i, t := range tenants {
		// Limits a `tenant add` set earlier are kept; the weight is the
		// authority's.
		l, _, err := bus.TenantLimitsOf(ctx, js, messages.Tenant(t))
		if err != nil {
			return failErr("%v", err)
		}
		l.Weight = tenancy.WeightDefault
		if i < len(weights) {
			l.Weight = weights[i]
		}
		if err := bus.ProvisionTenant(ctx, js, busCfg, messages.Tenant(t), l); err != nil {
			return failErr("%v", err)
		}
	}
	return nil
}

// upComponents builds the scheduler, skill worker and narrator of up.
func upComponents(nc *nats.Conn, cfg *config.File, o upOptions, log *slog.Logger, reg prometheus.Registerer) ([]namedComponent, error) {
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
	comps, err := buildComponents(nc, *cfg, log, reg)
	if err != nil {
		return nil, failErr("%v", err)
	}
	return comps, nil
}

// upConsoles are the consoles up serves and how to sign in.
type upConsoles struct {
	url       string
	loginLine string
	tenants   []string
}

// serveUpConsoles serves the console (one per tenant with --tenants), with
// the configuration's logins, else the operator login up keeps in its data
// folder (made at the first start).
func serveUpConsoles(ctx context.Context, nc *nats.Conn, busCfg bus.Config, cfg config.File, o upOptions, emb *embeddedUp, log *slog.Logger, reg *prometheus.Registry) (upConsoles, error) {
	out := upConsoles{url: "disabled (--console-port 0)"}
	logins, err := loginsOf(cfg)
	if err != nil {
		return out, usageErr("%v", err)
	}
	logins.reg = reg
	if o.consolePort == 0 {
		return out, nil
	}
	if !cfg.Console.Configured() {
		dir, err := filepath.Abs(o.dataDir)
		if err != nil {
			return out, usageErr("--data-dir: %v", err)
		}
		u, password, created, err := upLogin(dir)
		if err != nil {
			return out, failErr("%v", err)
		}
		logins.users = []console.User{u}
		_, passwordFile := upLoginFiles(dir)
		out.loginLine = fmt.Sprintf("  console login: %s, password in %s (no console users configured)\n", u.Name, passwordFile)
		if created {
			out.loginLine = fmt.Sprintf("  console login: %s, password %s (shown once; also in %s)\n", u.Name, password, passwordFile)
		}
	}
	// The operator's console: with tenants, on the service's account
	// across every tenant (sessions <tenant>.<session>).
	ol := logins
	ol.acrossTenants = cfg.NATS.Tenants
	curl, _, err := serveConsole(ctx, nc, cfg.NATS.Prefix, fmt.Sprintf("127.0.0.1:%d", max(o.consolePort, 0)), nil, ol, log)
	if err != nil {
		return out, failErr("%v", err)
	}
	out.url = curl
	if !cfg.NATS.Tenants {
		return out, nil
	}
	// Each tenant gets a console of its own too, connected with its
	// credentials: it shows and acts on that tenant's sessions only, as the
	// tenant's game servers do.
	for i, creds := range emb.tenantCreds {
		tc := busCfg
		tc.Tenants, tc.CredsFile, tc.Name = false, creds, "narratoria-console-"+o.tenants[i]
		tnc, err := bus.Connect(ctx, tc, log)
		if err != nil {
			return out, failErr("console of tenant %s: %v", o.tenants[i], err)
		}
		context.AfterFunc(ctx, tnc.Close)
		port := max(o.consolePort, 0)
		if port > 0 {
			port += 1 + i
		}
		tl := logins
		if tl.auditJS, err = jetstream.New(nc); err != nil {
			return out, failErr("%v", err)
		}
		tl.tenant = o.tenants[i]
		curl, _, err := serveConsole(ctx, tnc, cfg.NATS.Prefix, fmt.Sprintf("127.0.0.1:%d", port), nil, tl, log)
		if err != nil {
			return out, failErr("%v", err)
		}
		out.tenants = append(out.tenants, curl)
	}
	return out, nil
}

// printUp says what runs and how to reach it.
func printUp(s Streams, o upOptions, url, metricsAddr string, cons upConsoles, emb *embeddedUp) {
	credsLine := ""
	if emb != nil {
		credsLine = fmt.Sprintf("  creds:   %s (clients need them: the narratoria CLI finds them there from this folder; nats --creds %s)\n", emb.clientCreds, emb.clientCreds)
		credsLine += fmt.Sprintf("  game:    %s (a game server's: the game role only, replies on %s; narratoria --creds %s)\n", emb.gameCreds, tenancy.GameInbox, emb.gameCreds)
	}
	fmt.Fprintf(s.Out, `Narratoria is running.
  NATS:    %s
%s  console: %s
%s  metrics: %s
Try, in another terminal:
  go run ./cmd/narratoria prompt --session demo "I roll to pick the lock"
  go run ./cmd/narratoria watch --session demo
  go run ./cmd/narratoria skills
Press Ctrl-C to stop.
`, url, credsLine, cons.url, cons.loginLine, metricsAddr)
	if emb == nil {
		return
	}
	for i, creds := range emb.tenantCreds {
		fmt.Fprintf(s.Out, "Tenant %s: add --creds %s to the commands above (the console above is the operator's, across tenants).\n", o.tenants[i], creds)
		if i < len(cons.tenants) {
			fmt.Fprintf(s.Out, "  its console: %s\n", cons.tenants[i])
		}
	}
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
