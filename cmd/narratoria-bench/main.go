// Command narratoria-bench measures Narratoria against baselines measured in
// the same run and writes docs/performance.md. `make bench` runs it;
// `make bench-quick` runs the quick mode (under 2 minutes).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/bench"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "serve-nats" {
		nodes, err := strconv.Atoi(os.Args[3])
		if err == nil {
			err = bench.ServeNATS(os.Args[2], nodes)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "narratoria-bench:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "serve-scheduler" {
		if err := bench.ServeScheduler(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "narratoria-bench:", err)
			os.Exit(1)
		}
		return
	}
	fs := pflag.NewFlagSet("narratoria-bench", pflag.ContinueOnError)
	quick := fs.Bool("quick", false, "fewer iterations and smaller plans")
	docs := fs.String("docs", "docs", "folder for performance.md and performance-scale.svg (empty: do not write)")
	only := fs.String("only", "", "run only these figures, comma-separated (1 also gives 2; r3: figures 1, 5 and 9 on a 3-node cluster)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (and of the nats-server child to <file>.server)")
	memprofile := fs.String("memprofile", "", "write an allocation profile of the whole run to this file")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "narratoria-bench: %v (see 'narratoria-bench --help')\n", err)
		os.Exit(2)
	}
	if *version {
		app.PrintVersion(os.Stdout, "narratoria-bench")
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "narratoria-bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "narratoria-bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
		// The nats-server child profiles itself next to it.
		_ = os.Setenv(bench.ServerProfileEnv, *cpuprofile+".server")
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "narratoria-bench:", err)
		os.Exit(1)
	}
	if err := bench.Run(context.Background(), bench.Options{Quick: *quick, Out: os.Stdout, DocsDir: *docs, Self: self, Only: *only}); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "narratoria-bench:", err)
		os.Exit(1)
	}
	if *memprofile != "" {
		f, err := os.Create(*memprofile)
		if err == nil {
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "narratoria-bench:", err)
			os.Exit(1)
		}
	}
}
