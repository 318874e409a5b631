package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/tenancy"
	"github.com/narratoria/runtime/pkg/messages"
)

// tenantOptions are the flags of `narratoria tenant`.
type tenantOptions struct {
	authDir string
}

func newTenantCmd(s Streams, o *clientOptions) *cobra.Command {
	t := &tenantOptions{}
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Add, list, rotate and remove the tenants of a multi-tenant deployment",
		Long: `Manage the tenants of a multi-tenant deployment (docs/decisions/, "Tenants").
A tenant is a NATS account: its game servers connect with the .creds file
'tenant add' writes and reach only their own sessions. The keys live in
--auth-dir (for 'narratoria up --tenants', its --data-dir); every change is
pushed to the running server (--nats-url) with the system account's
credentials kept there, so no server or component restarts.`,
	}
	cmd.PersistentFlags().StringVar(&t.authDir, "auth-dir", "./data", "the authority's folder: operator, accounts and tenants' keys (narratoria up --tenants uses its --data-dir)")
	cmd.AddCommand(newTenantInitCmd(s, o, t), newTenantAddCmd(s, o, t), newTenantLsCmd(s, o, t), newTenantRotateCmd(s, o, t), newTenantRmCmd(s, o, t))
	return cmd
}

// open opens the authority of --auth-dir; it must exist already (created
// by `narratoria up --tenants` or an earlier `tenant add`) unless create.
func (t *tenantOptions) open(o *clientOptions, create bool) (*tenancy.Authority, error) {
	if !create {
		if _, err := os.Stat(filepath.Join(t.authDir, "operator.jwt")); err != nil {
			return nil, usageErr("--auth-dir %s holds no authority (start `narratoria up --tenants NAME` there first): %v", t.authDir, err)
		}
	}
	a, err := tenancy.Open(t.authDir, o.bus.Prefix)
	if err != nil {
		return nil, failErr("%v", err)
	}
	return a, nil
}

// busAs is the connection of the client flags (server, TLS, prefix) with
// the authority's credentials creds instead of the flags'.
func busAs(o *clientOptions, creds string) bus.Config {
	return bus.Config{URL: o.bus.URL, Name: "narratoria-tenant", CredsFile: creds, Prefix: o.bus.Prefix,
		TLSCA: o.bus.TLSCA, TLSCert: o.bus.TLSCert, TLSKey: o.bus.TLSKey}
}

// connectAs dials with cfg, saying as whom and what for when it cannot.
func connectAs(ctx context.Context, cfg bus.Config, as string) (*nats.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := bus.Connect(cctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, failErr("connect as %s: %v — is the server running?", as, err)
	}
	return nc, nil
}

// push sends tenant's account JWT to the running server.
func (t *tenantOptions) push(ctx context.Context, o *clientOptions, a *tenancy.Authority, tenant string) error {
	nc, err := connectAs(ctx, busAs(o, a.SystemCreds()), "the system account to push the change")
	if err != nil {
		return err
	}
	defer nc.Close()
	jwt, err := a.AccountJWT(tenant)
	if err != nil {
		return failErr("%v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	if err := tenancy.Push(pctx, nc, jwt); err != nil {
		return failErr("push tenant %s to the server: %v", tenant, err)
	}
	return nil
}

func newTenantInitCmd(s Streams, o *clientOptions, t *tenantOptions) *cobra.Command {
	var serverConf, rolesFile string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the authority (operator, system and service accounts) and the server's auth configuration",
		Long: `Create, in --auth-dir, the operator, the system account and the service account
that runs every component (its credentials: <auth-dir>/svc.creds), unless they
exist already, and write the nats-server configuration that trusts them
(operator mode, a full account resolver under <auth-dir>/resolver) to
--server-conf, for deploy/nats/multi-tenant.conf to include. With --roles, each
role of the single-tenant accounts file gets a user of its own in the service
account, with the same permissions rewritten for the tenant token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := t.open(o, true)
			if err != nil {
				return err
			}
			if serverConf != "" {
				if err := os.WriteFile(serverConf, []byte(a.ServerConfig()), 0o600); err != nil {
					return failErr("%v", err)
				}
			}
			if rolesFile != "" {
				b, err := os.ReadFile(rolesFile)
				if err != nil {
					return usageErr("--roles: %v", err)
				}
				perms, err := tenancy.RolePermissions(b, o.bus.Prefix)
				if err != nil {
					return usageErr("--roles %s: %v", rolesFile, err)
				}
				paths, err := a.RoleCreds(perms)
				if err != nil {
					return failErr("%v", err)
				}
				for _, r := range slices.Sorted(maps.Keys(paths)) {
					fmt.Fprintf(s.Out, "role %-24s --creds %s\n", r, paths[r])
				}
			}
			fmt.Fprintf(s.Out, "authority in %s; components connect with --creds %s and nats.tenants: true\n", a.Dir(), a.ServiceCreds())
			if serverConf != "" {
				fmt.Fprintf(s.Out, "server configuration written to %s\n", serverConf)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&serverConf, "server-conf", "", "write the nats-server auth configuration (operator, resolver) to this file")
	cmd.Flags().StringVar(&rolesFile, "roles", "", "write <auth-dir>/roles/<role>.creds for each role of this accounts file (deploy/nats/accounts.conf): the components' least-privilege users inside the service account")
	return cmd
}

// provision creates the tenant's state stream (or sets its limits) as the
// service account, with the service credentials the authority keeps.
func (t *tenantOptions) provision(ctx context.Context, o *clientOptions, a *tenancy.Authority, tenant string, l bus.TenantLimits, replicas int) error {
	weight, err := a.Weight(tenant)
	if err != nil {
		return failErr("%v", err)
	}
	l.Weight = weight
	cfg := busAs(o, a.ServiceCreds())
	cfg.Replicas = replicas
	nc, err := connectAs(ctx, cfg, "the service account to create the tenant's state stream")
	if err != nil {
		return err
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return failErr("%v", err)
	}
	if err := bus.ProvisionTenant(cctx, js, cfg, messages.Tenant(tenant), l); err != nil {
		return failErr("%v", err)
	}
	return nil
}

func newTenantAddCmd(s Streams, o *clientOptions, t *tenantOptions) *cobra.Command {
	var credsOut string
	var limits tenancy.Limits
	var own bus.TenantLimits
	var replicas int
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a tenant (or change its limits, or bring a removed one back) and write the credentials its game servers use",
		Long: `Add a tenant and write the credentials its game servers connect with. For a
tenant that exists, change its limits: its credentials stay as they are. For a
tenant removed with 'tenant rm', bring it back with new credentials: the ones it
had before stay refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := t.open(o, false)
			if err != nil {
				return err
			}
			did := "added"
			if existing, _ := a.Tenants(); slices.ContainsFunc(existing, func(x tenancy.Tenant) bool { return x.Name == args[0] }) {
				did = "updated (its credentials are unchanged)"
			}
			creds, err := a.AddTenant(args[0], limits)
			if errors.Is(err, tenancy.ErrTenantRevoked) {
				creds, err = a.Readd(args[0], limits)
				did = "re-added with new credentials (the ones it had before stay refused)"
			}
			if err != nil {
				return tenantErr(err)
			}
			if err := t.push(cmd.Context(), o, a, args[0]); err != nil {
				return err
			}
			if err := t.provision(cmd.Context(), o, a, args[0], own, replicas); err != nil {
				return err
			}
			if creds, err = credsTo(creds, credsOut); err != nil {
				return err
			}
			weight, err := a.Weight(args[0])
			if err != nil {
				return failErr("%v", err)
			}
			fmt.Fprintf(s.Out, "tenant %s %s (weight %d); its game servers connect with --creds %s\n", args[0], did, weight, creds)
			return nil
		},
	}
	cmd.Flags().StringVar(&credsOut, "creds-out", "", "also write the tenant's credentials to this file")
	cmd.Flags().Int64Var(&limits.MaxConnections, "max-connections", 0, "connections the tenant may hold at once (0: no limit)")
	cmd.Flags().Int64Var(&limits.MaxPayload, "max-payload", 0, "largest message the tenant may send, in bytes (0: the server's)")
	cmd.Flags().Int64Var(&own.StateMaxBytes, "max-state-bytes", bus.TenantStateMaxDefault, "bytes of the tenant's session states (its state stream); a plan whose commit the full stream refuses fails with storage_refused")
	cmd.Flags().Int64Var(&own.MaxTokensPerHour, "max-tokens-per-hour", 0, "model tokens (prompt and completion) the tenant's prompts may spend in any hour, per narrator; over it a call is refused (logged, narratoria_llm_budget_refusals_total) and the rule planner and the template prose answer (0: the narrator's narrator.llm.maxTokensPerHour)")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of the tenant's state stream (3 in a cluster)")
	cmd.Flags().IntVar(&limits.Weight, "weight", 0, "the tenant's share of a skill whose workers are saturated: weight 3 is served three jobs for one of weight 1 (default: keep the tenant's, 1 for a new one)")
	return cmd
}

// tenantErr is the CLI's error for a refused tenant change: an unknown or
// removed tenant is a failure of what was asked (exit 1), anything else
// (a bad name) a usage error.
func tenantErr(err error) error {
	if errors.Is(err, tenancy.ErrUnknownTenant) || errors.Is(err, tenancy.ErrTenantRevoked) {
		return failErr("%s", strings.TrimPrefix(err.Error(), "tenancy: "))
	}
	return usageErr("%s", strings.TrimPrefix(err.Error(), "tenancy: "))
}

// credsTo copies the credentials at creds to out when out is set, and
// returns where they are to be used from.
func credsTo(creds, out string) (string, error) {
	if out == "" {
		return creds, nil
	}
	if err := copyFile(creds, out); err != nil {
		return "", failErr("--creds-out: %v", err)
	}
	return out, nil
}

func newTenantLsCmd(s Streams, o *clientOptions, t *tenantOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the tenants",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := t.open(o, false)
			if err != nil {
				return err
			}
			ts, err := a.Tenants()
			if err != nil {
				return failErr("%v", err)
			}
			for _, x := range ts {
				state := "active"
				if x.Revoked {
					state = "revoked"
				}
				fmt.Fprintf(s.Out, "%-24s %-8s weight %-3d %s\n", x.Name, state, x.Weight, x.Account)
			}
			return nil
		},
	}
}

func newTenantRotateCmd(s Streams, o *clientOptions, t *tenantOptions) *cobra.Command {
	var credsOut string
	cmd := &cobra.Command{
		Use:   "rotate NAME",
		Short: "Issue new credentials to a tenant and revoke its older ones (a removed tenant is brought back with 'tenant add')",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := t.open(o, false)
			if err != nil {
				return err
			}
			creds, err := a.Rotate(args[0])
			if errors.Is(err, tenancy.ErrTenantRevoked) {
				return failErr("tenant %s was removed: nothing to rotate; `narratoria tenant add %s` brings it back with new credentials", args[0], args[0])
			}
			if err != nil {
				return tenantErr(err)
			}
			if err := t.push(cmd.Context(), o, a, args[0]); err != nil {
				return err
			}
			if creds, err = credsTo(creds, credsOut); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "tenant %s has new credentials in %s; the older ones are refused\n", args[0], creds)
			return nil
		},
	}
	cmd.Flags().StringVar(&credsOut, "creds-out", "", "also write the new credentials to this file")
	return cmd
}

func newTenantRmCmd(s Streams, o *clientOptions, t *tenantOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a tenant: every credential of it is revoked and its connections are closed at once ('tenant add' brings it back)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := t.open(o, false)
			if err != nil {
				return err
			}
			err = a.Revoke(args[0])
			if errors.Is(err, tenancy.ErrTenantRevoked) {
				fmt.Fprintf(s.Out, "tenant %s was removed already; nothing changed\n", args[0])
				return nil
			}
			if err != nil {
				return tenantErr(err)
			}
			if err := t.push(cmd.Context(), o, a, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "tenant %s removed: its credentials are refused; its sessions' data stays until the streams' age limits\n", args[0])
			return nil
		},
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
