package app_test

import (
	"debug/buildinfo"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
)

// TestEveryBinaryAnswersVersion (issue 47): each of the six binaries
// answers --version with its name and its build version — what its NATS
// micro service reports (bus.ServiceVersion of the binary's own build
// information) — and takes its flags in the narratoria CLI's style (GNU
// long flags, --help listing them so).
func TestEveryBinaryAnswersVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the six binaries")
	}
	var versions []string
	for _, name := range []string{"narratoria", "scheduler", "narrator", "skillworker", "narratoria-skills", "narratoria-bench"} {
		bin := natstest.Build(t, "../../cmd/"+name)
		out, err := exec.Command(bin, "--version").CombinedOutput()
		require.NoError(t, err, "%s --version: %s", name, out)
		bi, err := buildinfo.ReadFile(bin)
		require.NoError(t, err)
		want := bus.BuildVersion(bi, true)
		require.Equal(t, name+" version "+want+"\n", string(out), "%s reports the version its micro service does", name)
		versions = append(versions, want)
		if name == "narratoria-skills" {
			continue // no flags but --version: its arguments are scripts
		}
		out, err = exec.Command(bin, "--help").CombinedOutput()
		require.NoError(t, err, "%s --help: %s", name, out)
		require.Contains(t, string(out), "--version", "%s lists --version in --help", name)
		require.NotContains(t, string(out), "\n  -version", "%s takes GNU long flags, not Go's single-dash ones", name)
		if name != "narratoria" && name != "narratoria-bench" {
			require.Contains(t, string(out), "--nats-url string", name)
			code := exec.Command(bin, "--no-such-flag").Run()
			var ee *exec.ExitError
			require.ErrorAs(t, code, &ee)
			require.Equal(t, 2, ee.ExitCode(), "%s: an unknown flag is a usage error", name)
		}
	}
	for _, v := range versions {
		require.Equal(t, versions[0], v, "one build, one version")
	}
}
