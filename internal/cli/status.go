package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/pkg/messages"
)

// PartitionMap is what `narratoria status` reports: how many partitions
// there are and which instance of each group owns each one.
type PartitionMap struct {
	// Partitions is the partition count the streams were provisioned with.
	Partitions int `json:"partitions"`
	// Groups has "scheduler" and "narrator".
	Groups []GroupMap `json:"groups"`
}

// GroupMap is one group's owners.
type GroupMap struct {
	// Group is "scheduler" or "narrator".
	Group string `json:"group"`
	// Owners lists each instance with the partitions it owns, sorted.
	Owners []InstanceShare `json:"owners"`
	// Unowned are the partitions nobody holds now (a move in progress).
	Unowned []int `json:"unowned"`
}

// InstanceShare is one instance's partitions.
type InstanceShare struct {
	// ID is the instance's ID.
	ID string `json:"id"`
	// Partitions it owns, sorted.
	Partitions []int `json:"partitions"`
}

func newStatusCmd(s Streams, o *clientOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the partition map: which scheduler and which narrator owns each partition of sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			count, err := bus.ProvisionedPartitions(ctx, js)
			if err != nil {
				return failErr("%v", err)
			}
			owners, err := js.KeyValue(ctx, messages.BucketOwners)
			if err != nil {
				return failErr("no partition owners on %s (%v) — has a scheduler or narrator started?", o.bus.URL, err)
			}
			pm := PartitionMap{Partitions: count}
			for _, group := range []string{"scheduler", "narrator"} {
				m, err := partition.Owners(ctx, owners, group, count)
				if err != nil {
					return failErr("%v", err)
				}
				gm := GroupMap{Group: group, Owners: []InstanceShare{}, Unowned: []int{}}
				by := map[string][]int{}
				for p := range count {
					if id, ok := m[p]; ok {
						by[id] = append(by[id], p)
					} else {
						gm.Unowned = append(gm.Unowned, p)
					}
				}
				for id, ps := range by {
					gm.Owners = append(gm.Owners, InstanceShare{ID: id, Partitions: ps})
				}
				sort.Slice(gm.Owners, func(i, j int) bool { return gm.Owners[i].ID < gm.Owners[j].ID })
				pm.Groups = append(pm.Groups, gm)
			}
			if asJSON {
				b, _ := json.MarshalIndent(pm, "", "  ")
				fmt.Fprintln(s.Out, string(b))
				return nil
			}
			fmt.Fprintf(s.Out, "%d partitions (sessions map to partition fnv32a(session) mod %d)\n", count, count)
			for _, g := range pm.Groups {
				fmt.Fprintf(s.Out, "\n%s: %d instance(s)\n", g.Group, len(g.Owners))
				for _, in := range g.Owners {
					fmt.Fprintf(s.Out, "  %-40s %3d  %s\n", in.ID, len(in.Partitions), ranges(in.Partitions))
				}
				if len(g.Unowned) > 0 {
					fmt.Fprintf(s.Out, "  %-40s %3d  %s\n", "(no owner now)", len(g.Unowned), ranges(g.Unowned))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the map as JSON")
	return cmd
}

// ranges prints sorted partitions compactly: 0-3 8 10-11.
func ranges(ps []int) string {
	ps = slices.Sorted(slices.Values(ps))
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ps[i], ps[j]))
		} else {
			parts = append(parts, fmt.Sprint(ps[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, " ")
}
