package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestShippedConfigLoadsAndDocumentsEveryKey(t *testing.T) {
	f, err := Load("../../config/narratoria.yaml", func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, f.Scheduler.ApprovalTimeout)
	require.Equal(t, 1048576, f.Worker.Limits.MaxLineBytes)
	b, err := os.ReadFile("../../config/narratoria.yaml")
	require.NoError(t, err)
	text := string(b)
	var walk func(v reflect.Type, path string)
	walk = func(v reflect.Type, path string) {
		for i := range v.NumField() {
			f := v.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			require.Contains(t, text, tag+":", "config/narratoria.yaml documents %s%s", path, tag)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
				walk(f.Type, path+tag+".")
			}
		}
	}
	walk(reflect.TypeOf(File{}), "")
}

func TestEnvOverridesAndErrors(t *testing.T) {
	env := map[string]string{"NARRATORIA_NATS_URL": "nats://x:1", "NARRATORIA_WORKER_CONCURRENCY": "7",
		"NARRATORIA_WORKER_SKILLS": "a, b", "NARRATORIA_SCHEDULER_PLANTIMEOUT": "2s", "NARRATORIA_WORKER_LIMITS_MAXEVENTS": "9"}
	f, err := Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, "nats://x:1", f.NATS.URL)
	require.Equal(t, 7, f.Worker.Concurrency)
	require.Equal(t, []string{"a", "b"}, f.Worker.Skills)
	require.Equal(t, 2*time.Second, f.Scheduler.PlanTimeout)
	require.Equal(t, 9, f.Worker.Limits.MaxEvents)

	_, err = Load("", func(k string) (string, bool) { return "soon", k == "NARRATORIA_SCHEDULER_PLANTIMEOUT" })
	require.ErrorContains(t, err, "NARRATORIA_SCHEDULER_PLANTIMEOUT")
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("worker:\n  concurency: 3\n"), 0o644))
	_, err = Load(p, nil)
	require.ErrorContains(t, err, "concurency")
	require.NoError(t, os.WriteFile(p, []byte("log:\n  level: loud\n"), 0o644))
	_, err = Load(p, nil)
	require.ErrorContains(t, err, "log.level")
	require.NoError(t, os.WriteFile(p, []byte(""), 0o644))
	_, err = Load(p, nil)
	require.NoError(t, err, "an empty file is an empty configuration")
}

func TestOTelSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("otel:\n  endpoint: http://127.0.0.1:4318\n  sampleRatio: 0.25\n  serviceName: game\n  resourceAttributes:\n    deployment.environment.name: test\n"), 0o644))
	none := func(string) (string, bool) { return "", false }
	f, err := Load(p, none)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:4318", f.OTel.Endpoint)
	require.Equal(t, 0.25, f.OTel.SampleRatio)
	require.Equal(t, "game", f.OTel.ServiceName)
	require.Equal(t, map[string]string{"deployment.environment.name": "test"}, f.OTel.ResourceAttributes)

	env := map[string]string{"NARRATORIA_OTEL_ENDPOINT": "collector:4318", "NARRATORIA_OTEL_INSECURE": "true", "NARRATORIA_OTEL_SAMPLERATIO": "0.5"}
	f, err = Load(p, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, "collector:4318", f.OTel.Endpoint)
	require.True(t, f.OTel.Insecure)
	require.Equal(t, 0.5, f.OTel.SampleRatio)

	for yaml, key := range map[string]string{
		"otel:\n  sampleRatio: 1.5\n":                                   "otel.sampleRatio",
		"otel:\n  endpoint: collector\n":                                "otel.endpoint",
		"otel:\n  endpoint: ftp://collector:4318\n":                     "otel.endpoint",
		"otel:\n  endpoint: https://collector:4318\n  insecure: true\n": "otel.insecure",
		"otel:\n  resourceAttributes:\n    service.name: x\n":           "otel.resourceAttributes",
		"otel:\n  resourceAttributes:\n    service.instance.id: x\n":    "otel.resourceAttributes",
		"otel:\n  endpont: collector:4318\n":                            "endpont",
	} {
		require.NoError(t, os.WriteFile(p, []byte(yaml), 0o644))
		_, err := Load(p, none)
		require.ErrorContains(t, err, key, yaml)
	}
	_, err = Load("", func(k string) (string, bool) { return "lots", k == "NARRATORIA_OTEL_SAMPLERATIO" })
	require.ErrorContains(t, err, "NARRATORIA_OTEL_SAMPLERATIO")
}
