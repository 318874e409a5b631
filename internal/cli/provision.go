package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/config"
)

func newProvisionCmd(s Streams, o *clientOptions) *cobra.Command {
	var configPath string
	var replicas int
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create or update every stream and KV bucket (run as an operator; idempotent)",
		Long: `Create every stream and KV bucket Narratoria needs, and update those whose
configuration differs (replicas, ages, size limits, duplicate window). It is
idempotent: run it at each deployment. Components with nats.provision "check"
(the shipped least-privilege deployment) never create anything themselves: a
missing stream or bucket makes them unready until this runs.

Sizing comes from the nats section of --config (see config/narratoria.yaml) and
--replicas; the connection from the client flags (an operator's credentials).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath, nil)
			if err != nil {
				return usageErr("%v", err)
			}
			c := cfg.NATS
			c.Prefix = o.bus.Prefix
			if cmd.Flags().Changed("replicas") {
				c.Replicas = replicas
			}
			if err := c.WithDefaults().Validate(); err != nil {
				return usageErr("%v", err)
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			done, err := bus.ProvisionReport(ctx, js, c)
			for _, p := range done {
				fmt.Fprintf(s.Out, "%-28s %s\n", p.Name, p.Action)
			}
			if err != nil {
				return failErr("%v (is this user an operator?)", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file whose nats section sizes the streams")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of every stream and bucket (3 in a cluster)")
	return cmd
}
