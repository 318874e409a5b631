package cli

import (
	"context"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/sampleskills"
	"github.com/narratoria/runtime/pkg/skillkit"
)

// newSampleSkillCmd runs a Go sample skill's body, speaking the tool
// protocol on stdin/stdout: what the sample skills' wrappers call when the
// narratoria-skills binary was not built (hidden: scripts use it, people
// do not).
func newSampleSkillCmd(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:    "sample-skill SKILL/SCRIPT",
		Short:  "Run a Go sample skill's script body (used by the sample skills' wrappers)",
		Hidden: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("sample-skill takes one SKILL/SCRIPT argument")
			}
			if _, ok := sampleskills.Scripts[args[0]]; !ok {
				names := make([]string, 0, len(sampleskills.Scripts))
				for n := range sampleskills.Scripts {
					names = append(names, n)
				}
				sort.Strings(names)
				return usageErr("unknown sample script %q (one of %s)", args[0], strings.Join(names, ", "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
			defer stop()
			if code := skillkit.Run(ctx, s.In, s.Out, sampleskills.Scripts[args[0]]); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}
