// Package cli is the `narratoria` command line: `up` to run everything,
// the client commands that talk to any NATS server (`prompt`, `watch`,
// `plan validate`, `plan run`, `skills`, `state`, `session reset`), and
// `eval`, which measures a planner on labelled prompts.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/bus"
)

// Exit codes of the CLI.
const (
	// ExitOK is success.
	ExitOK = 0
	// ExitFailure is a failure of what was asked (e.g. an invalid plan).
	ExitFailure = 1
	// ExitUsage is a usage error (unknown command, bad flag, missing file).
	ExitUsage = 2
)

// exitError carries an exit code and a one-line message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

func failErr(format string, args ...any) error {
	return &exitError{code: ExitFailure, msg: fmt.Sprintf(format, args...)}
}

// silentFailure ends the command with ExitFailure after it printed its own output.
var silentFailure = &exitError{code: ExitFailure}

// Streams are the command's standard streams.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// NewRoot builds the command tree.
func NewRoot(s Streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "narratoria",
		Short:         "Narratoria Runtime: turn a player's words into narration by running plans of skill scripts over NATS",
		Version:       bus.ServiceVersion(""),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// What every binary's --version prints (app.PrintVersion): the build
	// version the components' NATS micro services report.
	root.SetVersionTemplate("narratoria version {{.Version}}\n")
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%v (see '%s --help')", err, c.CommandPath())
	})
	var client clientOptions
	client.bind(root)
	root.AddCommand(newPlanCmd(s, &client), newUpCmd(s), newPromptCmd(s, &client), newWatchCmd(s, &client),
		newSkillsCmd(s, &client), newStateCmd(s, &client), newSessionCmd(s, &client), newProvisionCmd(s, &client),
		newSampleSkillCmd(s), newConsoleCmd(s, &client), newStatusCmd(s, &client), newTenantCmd(s, &client),
		newAssetCmd(s, &client), newCredsCmd(s, &client), newEvalCmd(s, &client))
	return root
}

// Main runs the CLI with args and returns the process exit code.
func Main(args []string, s Streams) int {
	root := NewRoot(s)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(s.Err, "narratoria:", ee.msg)
		}
		return ee.code
	}
	// cobra's own errors (unknown command, missing args) are usage errors.
	fmt.Fprintln(s.Err, "narratoria:", err)
	return ExitUsage
}

// StdStreams returns the process's streams.
func StdStreams() Streams { return Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }
