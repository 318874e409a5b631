package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/console"
)

// consoleLogins are who may sign in to a served console, where it keeps
// its audit trail, and how it is served.
type consoleLogins struct {
	users []console.User
	proxy *console.TrustedProxy
	ttl   time.Duration
	// auditJS and tenant: a tenant's console audits through the
	// service's JetStream (console.Options.AuditJS, AuditTenant).
	auditJS jetstream.JetStream
	tenant  string
	// tls, when set, makes the console serve HTTPS only.
	tls *tls.Config
	// assetMaxSize bounds an asset object the console serves (0: the
	// default).
	assetMaxSize int64
	// reg receives the console's metrics (nil: none).
	reg prometheus.Registerer
	// acrossTenants makes it the operator's console across every tenant
	// (console.Options.Tenants), on the service's account.
	acrossTenants bool
}

// loginsOf reads the configuration's console section (and the asset limit
// of its nats section).
func loginsOf(f config.File) (consoleLogins, error) {
	c := f.Console
	users, proxy, err := c.Options()
	if err != nil {
		return consoleLogins{}, err
	}
	tc, err := c.TLSConfig()
	return consoleLogins{users: users, proxy: proxy, ttl: c.SessionTTL, tls: tc, assetMaxSize: f.NATS.AssetMaxSize}, err
}

// serveConsole serves the web console on addr until ctx ends and returns
// its URL. On plain HTTP on any address but loopback it logs a warning
// and returns it too, for the caller to show.
func serveConsole(ctx context.Context, nc *nats.Conn, prefix, addr string, hosts []string, logins consoleLogins, log *slog.Logger) (url, warning string, err error) {
	log = log.With(slog.String("component", "console"))
	cs, err := console.New(nc, console.Options{Prefix: prefix, Logger: log, AllowedHosts: hosts,
		Users: logins.users, TrustedProxy: logins.proxy, SessionTTL: logins.ttl, AuditJS: logins.auditJS, AuditTenant: logins.tenant,
		AssetMaxSize: logins.assetMaxSize, Registerer: logins.reg, Tenants: logins.acrossTenants})
	if err != nil {
		return "", "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cs.Close()
		return "", "", fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	scheme := "http"
	if logins.tls != nil {
		ln, scheme = tls.NewListener(ln, logins.tls), "https"
	} else if warning = console.PlainHTTPWarning(ln.Addr().String()); warning != "" {
		log.Warn(warning)
	}
	srv := &http.Server{Handler: cs.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("console: stopped serving", slog.Any("error", err))
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		cs.Close()
	})
	return scheme + "://" + ln.Addr().String() + "/", warning, nil
}

func newConsoleCmd(s Streams, o *clientOptions) *cobra.Command {
	var listen, configPath, httpsCert, httpsKey string
	var hosts []string
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for any deployment (plans as live graphs, sessions, skills, approvals)",
		Long: `Serve the web console on --listen for the deployment at --nats-url (with the
client flags' credentials, TLS and prefix): sessions with their narrations, each
plan drawn as its DAG and updated live, skills with their workers and health,
and the actions the user may take (send a prompt, approve or deny a waiting tool,
cancel a plan, reset a session). narratoria up serves it too (--console-port).

Every user signs in. The logins and their roles (viewer, gamemaster, operator)
come from the console: section of --config (config/narratoria.yaml; make a hash
with 'narratoria console hash-password'); without one, the console makes an
operator login "admin" for this run only and prints its password.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath, nil)
			if err != nil {
				return usageErr("%v", err)
			}
			if httpsCert != "" || httpsKey != "" {
				cfg.Console.TLSCert, cfg.Console.TLSKey = httpsCert, httpsKey
			}
			logins, err := loginsOf(cfg)
			if err != nil {
				return usageErr("%v", err)
			}
			var onceLine string
			if !cfg.Console.Configured() {
				password := console.NewPassword()
				hash, err := console.HashPassword(password)
				if err != nil {
					return failErr("%v", err)
				}
				logins.users = []console.User{{Name: "admin", Role: console.RoleOperator, PasswordHash: hash}}
				onceLine = fmt.Sprintf("console: no console users configured (--config, console.users): sign in as admin with password %s (this run only)\n", password)
			}
			nc, _, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			url, warning, err := serveConsole(ctx, nc, o.bus.Prefix, listen, hosts, logins, slog.New(slog.NewTextHandler(s.Err, nil)))
			if err != nil {
				return failErr("%v", err)
			}
			if warning != "" {
				fmt.Fprintf(s.Err, "WARNING: %s\n", warning)
			}
			fmt.Fprint(s.Out, onceLine)
			fmt.Fprintf(s.Out, "console: %s (Ctrl-C to stop)\n", url)
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7420", "address to serve the console on")
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file; its console: section lists the logins (see config/narratoria.yaml)")
	cmd.Flags().StringVar(&httpsCert, "https-cert", "", "PEM certificate (with its chain) to serve the console over HTTPS, with --https-key (console.tlsCert; --tls-cert is NATS's)")
	cmd.Flags().StringVar(&httpsKey, "https-key", "", "PEM private key of --https-cert (console.tlsKey)")
	cmd.AddCommand(newHashPasswordCmd(s))
	cmd.Flags().StringSliceVar(&hosts, "allow-host", nil, "a host name the console answers to besides localhost and IP addresses (repeatable), e.g. the name a reverse proxy serves it under; requests for other names are refused (DNS rebinding)")
	return cmd
}

func newHashPasswordCmd(s Streams) *cobra.Command {
	var token bool
	var name, role string
	cmd := &cobra.Command{
		Use:   "hash-password",
		Short: "Print a console login for the configuration: a bcrypt hash of a password read from stdin, or a new bearer token's hash",
		Long: `Read a password (one line, at least 8 characters) from standard input and print
a console.users entry with its bcrypt hash, to paste into the console: section of
the configuration. With --token, make a random bearer token instead (for scripts:
Authorization: Bearer <token>) and print it once with the entry holding its
SHA-256 hash; only the hash is stored.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := console.ParseRole(role)
			if err != nil {
				return usageErr("--role: %v", err)
			}
			if token {
				tok, hash := console.NewToken()
				fmt.Fprintf(s.Out, "# token (shown once, give it to the script): %s\n- name: %s\n  role: %s\n  tokenHash: %s\n", tok, name, r, hash)
				return nil
			}
			line, err := bufio.NewReader(s.In).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return failErr("read the password: %v", err)
			}
			hash, err := console.HashPassword(strings.TrimRight(line, "\r\n"))
			if err != nil {
				return usageErr("%v", err)
			}
			fmt.Fprintf(s.Out, "- name: %s\n  role: %s\n  passwordHash: %q\n", name, r, hash)
			return nil
		},
	}
	cmd.Flags().BoolVar(&token, "token", false, "make a random bearer token instead of hashing a password")
	cmd.Flags().StringVar(&name, "name", "admin", "the login's name")
	cmd.Flags().StringVar(&role, "role", "operator", "the login's role: viewer, gamemaster or operator")
	return cmd
}
