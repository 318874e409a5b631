package check

import (
	"fmt"
	"slices"
	"strings"
)

// checkDockerfile returns what a Dockerfile breaks: its final stage must
// switch to an unprivileged user (numeric, so Kubernetes' runAsNonRoot
// can verify it).
func checkDockerfile(name, text string) []string {
	stage := ""
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			stage = "" // a new stage starts as its base image's user
		case "USER":
			if len(f) > 1 {
				stage = f[1]
			}
		}
	}
	user, _, _ := strings.Cut(stage, ":")
	if user == "" || user == "0" || user == "root" || strings.Trim(user, "0123456789") != "" {
		return []string{fmt.Sprintf("%s: the image runs as %q: end with USER <unprivileged numeric UID>", name, stage)}
	}
	return nil
}

// dockerignoreMust are what the image build's context must leave out.
var dockerignoreMust = []string{".git", "data/", "bin/", "**/node_modules", "**/*.creds", "**/.env"}

// checkDockerignore returns what .dockerignore fails to leave out.
func checkDockerignore(text string) []string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	var probs []string
	for _, m := range dockerignoreMust {
		if !slices.Contains(lines, m) {
			probs = append(probs, fmt.Sprintf(".dockerignore: does not leave out %s", m))
		}
	}
	return probs
}
