package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImages: both images end as an unprivileged numeric user, and the
// build context leaves out the repository's history, data, binaries,
// node_modules, credentials and the generated .env. Each check is broken
// once and caught.
func TestImages(t *testing.T) {
	files := map[string]string{}
	for _, f := range []string{"Dockerfile", "Dockerfile.nats"} {
		b, err := readDeploy(f)
		if err != nil {
			t.Fatal(err)
		}
		files[f] = string(b)
		for _, p := range checkDockerfile(f, string(b)) {
			t.Error(p)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(deployDir, "..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkDockerignore(string(ignore)) {
		t.Error(p)
	}

	for _, tc := range []struct{ name, file, from, to string }{
		{"root at the end", "Dockerfile", "USER 10001:10001", "USER root"},
		{"no USER", "Dockerfile.nats", "USER 10002:10002", ""},
		{"a user by name", "Dockerfile", "USER 10001:10001", "USER narratoria"},
		{"the build stage's user only", "Dockerfile", "FROM debian:bookworm-slim", "USER 10001\nFROM debian:bookworm-slim\nRUN true"},
	} {
		broken := strings.Replace(files[tc.file], tc.from, tc.to, 1)
		if tc.name == "the build stage's user only" {
			broken = strings.Replace(broken, "USER 10001:10001\nWORKDIR", "WORKDIR", 1)
		}
		if broken == files[tc.file] || len(checkDockerfile(tc.file, broken)) == 0 {
			t.Errorf("%s: not caught", tc.name)
		}
	}
	for _, m := range dockerignoreMust {
		broken := strings.Replace(string(ignore), "\n"+m+"\n", "\n", 1)
		if broken == string(ignore) || len(checkDockerignore(broken)) == 0 {
			t.Errorf(".dockerignore without %s: not caught", m)
		}
	}
}
