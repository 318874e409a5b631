package bus

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// VersionDefault is the version a component reports when none is given:
// the module version the binary was built from (`go install …@v1.2.3`,
// or the pseudo-version Go stamps from the VCS), else the VCS revision it
// was built at, else "0.0.0-dev"; always valid SemVer (ServiceVersion).
var VersionDefault = BuildVersion(debug.ReadBuildInfo())

// BuildVersion is the version of a binary with this build information
// (from debug.ReadBuildInfo or debug/buildinfo.ReadFile): as
// VersionDefault describes.
func BuildVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "0.0.0-dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return semVerOf(v)
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return semVerOf("0.0.0-dev+" + s.Value[:12])
		}
	}
	return "0.0.0-dev"
}

// semVer is a SemVer 2.0.0 version (semver.org), without a leading v.
var semVer = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
	`(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?` +
	`(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// ServiceVersion is v as the NATS micro services and the trace resource
// report it: VersionDefault when v is empty, v without a leading "v"
// when that is valid SemVer (NATS micro refuses any other), else
// 0.0.0-dev with v kept as build metadata ("dev" gives 0.0.0-dev,
// "2024/06 build" 0.0.0-dev+2024-06-build).
func ServiceVersion(v string) string {
	if v == "" {
		return VersionDefault
	}
	return semVerOf(v)
}

// semVerOf maps a non-empty v to SemVer as ServiceVersion describes.
func semVerOf(v string) string {
	t := strings.TrimPrefix(v, "v")
	if semVer.MatchString(t) {
		return t
	}
	var ids []string
	for id := range strings.SplitSeq(t, ".") {
		id = strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
				return r
			}
			return '-'
		}, id)
		if id = strings.Trim(id, "-"); id != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || len(ids) == 1 && ids[0] == "dev" {
		return "0.0.0-dev"
	}
	return "0.0.0-dev+" + strings.Join(ids, ".")
}
