// Command narratoria-skills runs the Go sample skills: `narratoria-skills
// <skill>/<script>` speaks the tool protocol on stdin/stdout. The sample
// skills' scripts are sh wrappers around it.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/sampleskills"
	"github.com/narratoria/runtime/pkg/skillkit"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		app.PrintVersion(os.Stdout, "narratoria-skills")
		return
	}
	if len(os.Args) != 2 || os.Args[1] == "--help" || os.Args[1] == "-h" {
		names := make([]string, 0, len(sampleskills.Scripts))
		for n := range sampleskills.Scripts {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: narratoria-skills <skill>/<script> (or --version)\nscripts: %v\n", names)
		if len(os.Args) == 2 {
			return // --help
		}
		os.Exit(2)
	}
	fn, ok := sampleskills.Scripts[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "narratoria-skills: unknown script %q\n", os.Args[1])
		os.Exit(2)
	}
	skillkit.Main(fn)
}
