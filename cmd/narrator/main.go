// Command narrator turns prompts into narrations: it takes prompts from
// NARRATORIA_PROMPTS and narratoria.narrate, plans them into skill scripts,
// has the scheduler run them, replans on failure and publishes the
// narration.
package main

import (
	"os"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/narrator"
)

func main() {
	os.Exit(app.Main("narrator", os.Args[1:], nil, func(env app.Env) (app.Component, error) {
		return narrator.New(env.NC, env.Config.Narrator, narrator.Options{Logger: env.Log, Registerer: env.Registry, Bus: env.Config.NATS})
	}))
}
