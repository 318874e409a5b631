package bus

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServiceVersionIsSemVer: every version a component reports is one
// NATS micro accepts, whatever it was given.
func TestServiceVersionIsSemVer(t *testing.T) {
	require.Equal(t, VersionDefault, ServiceVersion(""))
	require.Regexp(t, semVer, VersionDefault)
	for in, want := range map[string]string{
		"1.2.3":               "1.2.3",
		"v1.2.3-rc.1+build.5": "1.2.3-rc.1+build.5",
		"dev":                 "0.0.0-dev",
		"2024/06 build":       "0.0.0-dev+2024-06-build",
		"1.0.0-01":            "0.0.0-dev+1.0.0-01",
		"0.0.0-20261126094003-895a100abcde+dirty": "0.0.0-20261126094003-895a100abcde+dirty",
		"1.2": "0.0.0-dev+1.2",
		"...": "0.0.0-dev",
	} {
		got := ServiceVersion(in)
		require.Equal(t, want, got, in)
		require.Regexp(t, semVer, got, in)
	}
	require.Equal(t, "0.0.0-dev", BuildVersion(nil, false))
	require.Equal(t, "1.4.0", BuildVersion(&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, true))
	require.Equal(t, "0.0.0-dev+0123456789ab", BuildVersion(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}}}, true))
}
