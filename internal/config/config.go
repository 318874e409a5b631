// Package config loads the one YAML configuration file of Narratoria
// (config/narratoria.yaml documents every key), applies environment
// overrides (NARRATORIA_<SECTION>_<KEY>, e.g. NARRATORIA_NATS_URL) and
// validates the result, naming the key at fault.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/console"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/tracing"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "NARRATORIA_"

// File is the whole configuration.
type File struct {
	// NATS says how to reach NATS.
	NATS bus.Config `yaml:"nats"`
	// Log configures logging.
	Log Log `yaml:"log"`
	// Metrics configures the /metrics, /healthz and /readyz listener.
	Metrics Metrics `yaml:"metrics"`
	// OTel configures the export of traces (OpenTelemetry).
	OTel tracing.Config `yaml:"otel"`
	// Worker configures skill workers.
	Worker skillworker.Config `yaml:"worker"`
	// Scheduler configures the scheduler.
	Scheduler scheduler.Config `yaml:"scheduler"`
	// Narrator configures the narrator.
	Narrator narrator.Config `yaml:"narrator"`
	// Console configures the web console's logins and roles.
	Console console.Config `yaml:"console"`
}

// Log configures log/slog output.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is text or json. Default text.
	Format string `yaml:"format"`
}

// Metrics configures the ops listener.
type Metrics struct {
	// Addr is host:port to listen on; empty disables it. Default empty
	// (each command sets its own default flag).
	Addr string `yaml:"addr"`
}

// Load reads path ("" for none), then applies environment overrides from
// getenv (os.LookupEnv when nil). Unknown keys are errors.
func Load(path string, getenv func(string) (string, bool)) (File, error) {
	var f File
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return f, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // an empty file is an empty configuration
			return f, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if getenv == nil {
		getenv = os.LookupEnv
	}
	if err := applyEnv(reflect.ValueOf(&f).Elem(), EnvPrefix, getenv); err != nil {
		return f, err
	}
	return f, f.Validate()
}

// Validate checks the log, nats, otel and console sections; component sections are
// checked by the components with their defaults applied.
func (f File) Validate() error {
	switch strings.ToLower(f.Log.Level) {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q must be debug, info, warn or error", f.Log.Level)
	}
	switch strings.ToLower(f.Log.Format) {
	case "", "text", "json":
	default:
		return fmt.Errorf("log.format: %q must be text or json", f.Log.Format)
	}
	if err := f.NATS.WithDefaults().Validate(); err != nil {
		return err
	}
	if err := f.Console.Validate(); err != nil {
		return err
	}
	return f.OTel.Validate()
}

// Logger builds the logger the file describes, writing to stderr.
func (f File) Logger() *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(strings.ToLower(cmpOr(f.Log.Level, "info"))))
	opts := &slog.HandlerOptions{Level: lvl}
	if strings.EqualFold(f.Log.Format, "json") {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

var durationType = reflect.TypeOf(time.Duration(0))

// applyEnv walks the struct and sets each field whose variable
// PREFIX_SECTION_KEY is present. Keys are the yaml tags, upper-cased.
func applyEnv(v reflect.Value, prefix string, getenv func(string) (string, bool)) error {
	t := v.Type()
	for i := range t.NumField() {
		ft := t.Field(i)
		tag := strings.Split(ft.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" || !ft.IsExported() {
			continue
		}
		name := prefix + strings.ToUpper(tag)
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct && fv.Type() != durationType {
			if err := applyEnv(fv, name+"_", getenv); err != nil {
				return err
			}
			continue
		}
		raw, ok := getenv(name)
		if !ok {
			continue
		}
		if err := setField(fv, raw); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func setField(fv reflect.Value, raw string) error {
	if fv.Type() == durationType {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 5s or 250ms", raw)
		}
		fv.SetInt(int64(d))
		return nil
	}
	switch fv.Kind() {
	case reflect.Pointer:
		v := reflect.New(fv.Type().Elem())
		if err := setField(v.Elem(), raw); err != nil {
			return err
		}
		fv.Set(v)
	case reflect.String:
		fv.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", raw)
		}
		fv.SetInt(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", raw)
		}
		fv.SetFloat(x)
	case reflect.Slice:
		if fv.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("cannot be set from the environment")
		}
		var parts []string
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		fv.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("cannot be set from the environment")
	}
	return nil
}
