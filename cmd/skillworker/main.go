// Command skillworker serves tool jobs for the skills in a folder: it
// registers them in the registry, pulls their jobs from JetStream, runs each
// script as a process and reports the outcome. Run as many as you need; the
// workers serving one skill share its jobs.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/narratoria/runtime/internal/app"
	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/skillworker"
)

func main() {
	flags := func(fs *pflag.FlagSet) func(*config.File) {
		dir := fs.String("skills-dir", "", "skills folder (default ./skills)")
		only := fs.StringSlice("skills", nil, "serve only these skills, comma-separated (default all)")
		conc := fs.Int("concurrency", 0, "scripts run at once (default: number of CPU cores)")
		return func(cfg *config.File) {
			if *dir != "" {
				cfg.Worker.SkillsDir = *dir
			}
			if len(*only) > 0 {
				cfg.Worker.Skills = *only
			}
			if *conc != 0 {
				cfg.Worker.Concurrency = *conc
			}
		}
	}
	os.Exit(app.Main("skillworker", os.Args[1:], flags, func(env app.Env) (app.Component, error) {
		return skillworker.New(env.NC, env.Config.Worker, skillworker.Options{Logger: env.Log, Registerer: env.Registry, Bus: env.Config.NATS})
	}))
}
