package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/tenancy"
)

// newCredsCmd is `narratoria creds`: credentials scoped to what their
// holder serves.
func newCredsCmd(s Streams, o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "creds",
		Short: "Make credentials scoped to what their holder serves (skill workers)",
	}
	cmd.AddCommand(newCredsWorkerCmd(s, o))
	return cmd
}

func newCredsWorkerCmd(s Streams, o *clientOptions) *cobra.Command {
	var (
		pool, authDir, out string
		skills             []string
		conf, tenants      bool
	)
	cmd := &cobra.Command{
		Use:   "worker --pool NAME --skills a,b",
		Short: "Credentials for skill workers serving only the named skills",
		Long: `Make the credentials of a pool of skill workers that serve only the named skills:
they may take only those skills' jobs, write only their registry entries and
read only their own replies (inbox prefix _INBOX_worker_<pool>, which the
workers must use: nats.inboxPrefix / NARRATORIA_NATS_INBOXPREFIX). A worker
credential cannot read another skill's jobs, have another skill's outcome,
events or progress accepted, or purge the asset store.

With an authority (operator mode: 'narratoria up', 'narratoria tenant init'),
it signs a user of the service account and writes its .creds (mode 0600) to
--out, default <auth-dir>/workers/<pool>.creds. With --conf it prints the
user block for deploy/nats/accounts.conf (a server configured by file) instead,
its password read from WORKER_<POOL>_PASSWORD.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if conf {
				text, err := tenancy.WorkerConf(o.bus.Prefix, pool, skills)
				if err != nil {
					return usageErr("%v", err)
				}
				fmt.Fprint(s.Out, text)
				return nil
			}
			if _, err := os.Stat(filepath.Join(authDir, "operator.jwt")); err != nil {
				return usageErr("--auth-dir %s holds no authority (start `narratoria up` there first, or use --conf for a server configured by file): %v", authDir, err)
			}
			a, err := tenancy.Open(authDir, o.bus.Prefix)
			if err != nil {
				return failErr("%v", err)
			}
			path, err := a.WorkerCreds(pool, skills, tenants)
			if err != nil {
				return usageErr("%v", err)
			}
			if out != "" {
				b, err := os.ReadFile(path)
				if err != nil {
					return failErr("%v", err)
				}
				if err := os.WriteFile(out, b, 0o600); err != nil {
					return failErr("--out: %v", err)
				}
				path = out
			}
			fmt.Fprintf(s.Out, "wrote %s: a worker of pool %s serving %v; run it with --creds %s and inbox prefix %s\n",
				path, pool, skills, path, tenancy.WorkerInbox(pool))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pool, "pool", "", "the pool's name (lowercase letters, digits, _): user worker_<pool>, inbox _INBOX_worker_<pool>")
	f.StringSliceVar(&skills, "skills", nil, "the skills its workers serve, comma-separated")
	f.StringVar(&authDir, "auth-dir", "./data", "the authority's folder (narratoria up's --data-dir)")
	f.StringVar(&out, "out", "", "where to write the .creds (default <auth-dir>/workers/<pool>.creds)")
	f.BoolVar(&conf, "conf", false, "print the user block for deploy/nats/accounts.conf instead")
	f.BoolVar(&tenants, "tenants", false, "for a multi-tenant deployment (its subjects carry the tenant)")
	_ = cmd.MarkFlagRequired("pool")
	_ = cmd.MarkFlagRequired("skills")
	return cmd
}
