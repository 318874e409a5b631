package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// newAssetCmd is `narratoria asset`: assets scripts listed, kept as
// objects in the narratoria_assets object store.
func newAssetCmd(s Streams, o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "asset", Short: "Fetch the files scripts listed as assets (images, maps), from any host"}
	var out string
	get := &cobra.Command{
		Use:   "get OBJECT",
		Short: "Write an asset object (a result's or narration's assets[].object, sha256-<hex>) to a file or stdout",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("asset get takes one OBJECT argument (an asset's \"object\", sha256-<hex>)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := o.client()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			data, mediaType, err := c.AssetObject(ctx, args[0])
			if err != nil {
				return failErr("%v", err)
			}
			if out == "" || out == "-" {
				_, err = s.Out.Write(data)
				return err
			}
			if err := os.WriteFile(out, data, 0o644); err != nil {
				return failErr("%v", err)
			}
			fmt.Fprintf(s.Err, "wrote %s (%d bytes, %s)\n", out, len(data), mediaType)
			return nil
		},
	}
	get.Flags().StringVarP(&out, "output", "o", "", "file to write (default: stdout)")
	cmd.AddCommand(get)
	return cmd
}
