package e2e

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// metricNames scans the Go sources for the Prometheus metric names the
// components register.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(narratoria_[a-z_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir("../../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	return names
}

// TestGrafanaDashboard: deploy/grafana's dashboard is a Grafana dashboard
// (title, uid, schemaVersion, panels with a type, a position and Prometheus
// targets) and every query names a metric the components export.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/grafana/narratoria-dashboard.json")
	require.NoError(t, err)
	var d struct {
		Title         string `json:"title"`
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Panels        []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct {
				W, H int
			} `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID)
	require.GreaterOrEqual(t, d.SchemaVersion, 30)
	known := metricNames(t)
	require.True(t, known["narratoria_narrator_prompts_total"], "the source scan finds metrics")
	metric := regexp.MustCompile(`narratoria_[a-z_]+`)
	ids := map[int]bool{}
	seen := map[string]bool{}
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel ids are unique")
		ids[p.ID] = true
		require.NotEmpty(t, p.Type, p.Title)
		require.Positive(t, p.GridPos.W, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.RefID, p.Title)
			names := metric.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, names, "%s: %s", p.Title, tg.Expr)
			for _, n := range names {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
				require.True(t, known[base], "%s: %s names %s, which no component exports", p.Title, tg.Expr, n)
				seen[base] = true
			}
		}
	}
	for _, want := range []string{"narratoria_narrator_prompts_total", "narratoria_narrator_prompt_seconds", "narratoria_scheduler_plans_total",
		"narratoria_skillworker_job_duration_seconds", "narratoria_scheduler_retries_total", "narratoria_scheduler_health_transitions_total",
		"narratoria_skillworker_queue_depth", "narratoria_scheduler_plans_in_flight"} {
		require.True(t, seen[want], "the dashboard shows %s", want)
	}
}
