package ops

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestEndpoints(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "narratoria_test_things_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	p := NewProbes()
	ready := errors.New("consumer not started")
	p.Live("nats", func() error { return nil })
	p.Ready("worker", func() error { return ready })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Serve(ctx, "127.0.0.1:0", reg, p, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "narratoria_test_things_total 1")
	require.Contains(t, body, "go_goroutines")
	code, _ = get("/healthz")
	require.Equal(t, 200, code)
	code, body = get("/readyz")
	require.Equal(t, 503, code)
	require.True(t, strings.Contains(body, "worker: consumer not started"))
	ready = nil
	code, _ = get("/readyz")
	require.Equal(t, 200, code)
	addr, err = Serve(ctx, "", reg, p, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Empty(t, addr, "an empty address disables the listener")
}
