package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// newAssetCmd is `narratoria asset`: assets scripts listed, kept as
// objects in the narratoria_assets object store.
func newAssetCmd(s Streams, o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "asset", Short: "Fetch the files scripts listed as assets (images, maps), from any host"}
	var out string
	var maxSize int64
	get := &cobra.Command{
		Use:   "get OBJECT",
		Short: "Write an asset object (a result's or narration's assets[].object, sha256-<hex>) to a file or stdout",
		Long: `Write an asset object to a file (-o) or stdout, streamed and checked as it comes:
its content must hash to its name. A file is written under a temporary name
and renamed only once the whole object checked out; on stdout the last byte
is written only then, and an object that does not check out is an error.
An object larger than --max-size is refused before any of it is read.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("asset get takes one OBJECT argument (an asset's \"object\", sha256-<hex>)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := o.client(client.WithAssetMaxSize(maxSize))
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			if out == "" || out == "-" {
				if _, _, err := c.CopyAssetObject(ctx, args[0], s.Out); err != nil {
					return failErr("%v", err)
				}
				return nil
			}
			info, n, err := copyAssetToFile(ctx, c, args[0], out)
			if err != nil {
				return failErr("%v", err)
			}
			fmt.Fprintf(s.Err, "wrote %s (%d bytes, %s)\n", out, n, info.MediaType)
			return nil
		},
	}
	get.Flags().StringVarP(&out, "output", "o", "", "file to write (default: stdout)")
	get.Flags().Int64Var(&maxSize, "max-size", messages.AssetMaxSizeDefault, "largest object to fetch, in bytes (the deployment's nats.assetMaxSize)")
	cmd.AddCommand(get)
	return cmd
}

// copyAssetToFile streams an asset object into a temporary file beside
// path and renames it to path once the object checked out.
func copyAssetToFile(ctx context.Context, c *client.Client, object, path string) (client.AssetObjectInfo, int64, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return client.AssetObjectInfo{}, 0, err
	}
	defer os.Remove(f.Name()) // gone once renamed
	info, n, err := c.CopyAssetObject(ctx, object, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return info, n, err
}
