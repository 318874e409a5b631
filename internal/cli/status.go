package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/pkg/messages"
)

// PartitionMap is what `narratoria status` reports: how many partitions
// there are and which instance of each group owns each one.
type PartitionMap struct {
	// Partitions is the partition count the streams were provisioned with.
	Partitions int `json:"partitions"`
	// Groups has "scheduler" and "narrator".
	Groups []GroupMap `json:"groups"`
	// Storage is each stream's and bucket's use against its budget.
	Storage []StoreUse `json:"storage"`
	// Schedulers are the running schedulers' fair dispatch (§12): per
	// skill, the jobs each admitted and holds back, by tenant, with recent
	// waits.
	Schedulers []scheduler.Status `json:"schedulers"`
}

// StoreUse is one stream's or bucket's use against its budget.
type StoreUse struct {
	// Name is the stream, or "KV <bucket>".
	Name string `json:"name"`
	// Bytes are stored now; Messages are the messages stored now that
	// are work or data, Markers the partitions' fence markers among them
	// (kept by the jobs and plans streams and the plans bucket, one per
	// partition an owner took: no work).
	Bytes    uint64 `json:"bytes"`
	Messages uint64 `json:"messages"`
	Markers  uint64 `json:"markers,omitempty"`
	// MaxBytes is the budget (-1: none); MaxMsgSize the largest message.
	MaxBytes   int64 `json:"maxBytes"`
	MaxMsgSize int32 `json:"maxMsgSize"`
	// Discard is "old" (the oldest go at the limit) or "new" (writes are
	// refused at the limit: storage_refused).
	Discard string `json:"discard"`
	// MaxAge is how long messages are kept ("" for ever).
	MaxAge string `json:"maxAge,omitempty"`
	// Oldest is the age of the oldest message kept ("" when empty).
	Oldest string `json:"oldest,omitempty"`
	// Shortened is set for a discard-old store at 90% of its budget or
	// more whose oldest message is younger than its age limit: it drops
	// messages before their time, so its window (history kept, the
	// prompt dedupe window) is only Oldest long.
	Shortened bool `json:"shortened,omitempty"`
}

// storeUse reads one store's use from its info at now.
func storeUse(shown string, info *jetstream.StreamInfo, now time.Time) StoreUse {
	u := StoreUse{Name: shown, Bytes: info.State.Bytes, Messages: info.State.Msgs, MaxBytes: info.Config.MaxBytes,
		MaxMsgSize: info.Config.MaxMsgSize, Discard: "old"}
	if info.Config.Discard == jetstream.DiscardNew {
		u.Discard = "new"
	}
	if info.Config.MaxAge > 0 {
		u.MaxAge = info.Config.MaxAge.String()
	}
	if info.State.Msgs > 0 && !info.State.FirstTime.IsZero() {
		age := now.Sub(info.State.FirstTime).Round(time.Second)
		u.Oldest = age.String()
		u.Shortened = u.Discard == "old" && info.Config.MaxBytes > 0 && float64(info.State.Bytes) >= 0.9*float64(info.Config.MaxBytes) &&
			(info.Config.MaxAge == 0 || age < info.Config.MaxAge)
	}
	return u
}

// fenceSubjects are the subjects of the partitions' fence markers, by
// stream: the jobs' (schedulers), the plans' (narrators) and the plans
// bucket's fence keys.
func fenceSubjects(prefix string) map[string]string {
	return map[string]string{
		messages.StreamJobs:          prefix + ".jobs._fence.*",
		messages.StreamPlans:         prefix + ".fence.narrator.*",
		"KV_" + messages.BucketPlans: "$KV." + messages.BucketPlans + ".fence.*",
	}
}

// markers counts the fence markers on a stream whose markers are on
// subjects filter.
func markers(ctx context.Context, st jetstream.Stream, filter string) (uint64, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// storage reads the use of every stream and bucket of the product;
// fence markers are counted apart from the messages.
func storage(ctx context.Context, js jetstream.JetStream, prefix string) ([]StoreUse, error) {
	c := bus.Config{}
	fences := fenceSubjects(prefix)
	var names, shown []string
	for _, sc := range c.StreamConfigs() {
		names, shown = append(names, sc.Name), append(shown, sc.Name)
	}
	for _, kc := range c.BucketConfigs() {
		names, shown = append(names, bus.KVStream(kc.Bucket)), append(shown, "KV "+kc.Bucket)
	}
	out := make([]StoreUse, 0, len(names))
	for i, name := range names {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		u := storeUse(shown[i], st.CachedInfo(), time.Now())
		if filter, ok := fences[name]; ok && u.Messages > 0 {
			if u.Markers, err = markers(ctx, st, filter); err != nil {
				return nil, fmt.Errorf("stream %s: %w", name, err)
			}
			u.Markers = min(u.Markers, u.Messages)
			u.Messages -= u.Markers
		}
		out = append(out, u)
	}
	return out, nil
}

// printStorage prints the storage table; a discard-new store at 80% of its
// budget or more is marked (at its limit it refuses writes), and so is a
// discard-old one whose window the budget has shortened.
func printStorage(w io.Writer, us []StoreUse) {
	fmt.Fprintf(w, "\nstorage: use against budget\n")
	for _, u := range us {
		budget, pct := "no limit", ""
		if u.MaxBytes > 0 {
			budget = fmt.Sprintf("%d MiB", u.MaxBytes>>20)
			p := float64(u.Bytes) * 100 / float64(u.MaxBytes)
			pct = fmt.Sprintf("%5.1f%%", p)
			if p >= 80 && u.Discard == "new" {
				pct += "  NEAR ITS LIMIT: writes will be refused (storage_refused)"
			}
			if u.Shortened {
				pct += fmt.Sprintf("  FULL: keeps only the last %s (age limit %s): raise its budget for the whole window", u.Oldest, cmp.Or(u.MaxAge, "none"))
			}
		}
		fences := ""
		if u.Markers > 0 {
			fences = fmt.Sprintf(" (+%d fence markers)", u.Markers)
		}
		fmt.Fprintf(w, "  %-28s %10d bytes %8d msgs%s  of %-9s discard %-3s %s\n", u.Name, u.Bytes, u.Messages, fences, budget, u.Discard, pct)
	}
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
		Short: "Show the partition map (which scheduler and which narrator owns each partition of sessions) and each stream's and bucket's use against its budget",
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
			if pm.Storage, err = storage(ctx, js, o.bus.Prefix); err != nil {
				return failErr("%v", err)
			}
			pm.Schedulers = scheduler.Statuses(ctx, nc, len(pm.Groups[0].Owners))
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
			printStorage(s.Out, pm.Storage)
			printQueues(s.Out, pm.Schedulers)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the map as JSON")
	return cmd
}

// printQueues prints each scheduler's fair dispatch by skill and tenant.
func printQueues(w io.Writer, ss []scheduler.Status) {
	shown := false
	for _, st := range ss {
		shown = shown || len(st.Queues) > 0
	}
	if !shown {
		return
	}
	fmt.Fprintf(w, "\nfair dispatch (jobs admitted to the work queue and held back, by skill and tenant; waits: dispatch to the script's start, recent jobs)\n")
	for _, st := range ss {
		for _, q := range st.Queues {
			bound := "no bound (slots unknown)"
			if q.Bound > 0 {
				bound = fmt.Sprintf("%d slots, bound %d", q.Slots, q.Bound)
			}
			fmt.Fprintf(w, "  %s  %s: %s; %d admitted, %d waiting\n", st.ID, q.Skill, bound, q.InFlight, q.Waiting)
			for _, t := range q.Tenants {
				fmt.Fprintf(w, "    %-20s weight %-3g admitted %-5d waiting %-6d wait p50 %-10s p99 %s\n", cmp.Or(t.Tenant, "(no tenant)"), t.Weight,
					t.InFlight, t.Waiting, time.Duration(t.WaitP50Ms*float64(time.Millisecond)).Round(time.Millisecond), time.Duration(t.WaitP99Ms*float64(time.Millisecond)).Round(time.Millisecond))
			}
		}
	}
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
