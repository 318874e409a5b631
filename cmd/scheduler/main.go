// Command scheduler runs Narratoria plans: it takes Plan JSON from
// NARRATORIA_PLANS, runs each plan's tools on the skill workers and
// publishes the Execution Result. Run two for failover: one is active, the
// other takes over within seconds of its death.
package main

import (
	"os"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/scheduler"
)

func main() {
	os.Exit(app.Main("scheduler", os.Args[1:], nil, func(env app.Env) (app.Component, error) {
		return scheduler.New(env.NC, env.Config.Scheduler, scheduler.Options{Logger: env.Log, Registerer: env.Registry, Bus: env.Config.NATS})
	}))
}
