package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/console"
)

// serveConsole serves the web console on addr until ctx ends and returns
// the address it listens on.
func serveConsole(ctx context.Context, nc *nats.Conn, prefix, addr string, hosts []string, log *slog.Logger) (string, error) {
	cs, err := console.New(nc, console.Options{Prefix: prefix, Logger: log.With(slog.String("component", "console")), AllowedHosts: hosts})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: cs.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
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
	return ln.Addr().String(), nil
}

func newConsoleCmd(s Streams, o *clientOptions) *cobra.Command {
	var listen string
	var hosts []string
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for any deployment (plans as live graphs, sessions, skills, approvals)",
		Long: `Serve the web console on --listen for the deployment at --nats-url (with the
client flags' credentials, TLS and prefix): sessions with their narrations, each
plan drawn as its DAG and updated live, skills with their workers and health,
and the actions the user may take (send a prompt, approve or deny a waiting tool,
cancel a plan, reset a session). narratoria up serves it too (--console-port).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, _, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			addr, err := serveConsole(ctx, nc, o.bus.Prefix, listen, hosts, slog.New(slog.NewTextHandler(s.Err, nil)))
			if err != nil {
				return failErr("%v", err)
			}
			fmt.Fprintf(s.Out, "console: http://%s/ (Ctrl-C to stop)\n", addr)
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7420", "address to serve the console on")
	cmd.Flags().StringSliceVar(&hosts, "allow-host", nil, "a host name the console answers to besides localhost and IP addresses (repeatable), e.g. the name a reverse proxy serves it under; requests for other names are refused (DNS rebinding)")
	return cmd
}
