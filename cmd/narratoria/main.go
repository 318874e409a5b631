// Command narratoria is the user-facing CLI of Narratoria Runtime: `narratoria
// up` runs everything on an embedded NATS server; the other commands talk to
// any NATS server. `narratoria --help` lists them.
package main

import (
	"os"

	"github.com/narratoria/runtime/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.StdStreams()))
}
