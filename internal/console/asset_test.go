package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// patterned is a large object's content made on the fly: one MiB of
// pseudo-random bytes, repeated.
type patterned struct {
	block []byte
	left  int64
	off   int
}

func newPatterned(size int64) *patterned {
	block := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(r.Uint32())
	}
	return &patterned{block: block, left: size}
}

func (p *patterned) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(int64(len(b)), p.left)], p.block[p.off:])
	p.off = (p.off + n) % len(p.block)
	p.left -= int64(n)
	return n, nil
}

// putObject stores content under name in the asset store, as any
// credential that may write it (a worker's) can: laid out as a worker lays
// it out (the store refuses the client Put's roll-up).
func putObject(t *testing.T, js jetstream.JetStream, name, mediaType string, r io.Reader) {
	t.Helper()
	require.NoError(t, bus.PutObject(t.Context(), js, messages.BucketAssets, jetstream.ObjectMeta{Name: name, Headers: nats.Header{"Content-Type": []string{mediaType}}}, r))
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestAssetStreamedFlat: three viewers fetch a 200 MB object (written with
// a worker's write access) at once through the console; each gets it
// whole and right, and the console's heap grows by well under 100 MB: it
// holds a chunk of each at a time, never the object. A console with the
// default limit refuses the object before sending a byte.
func TestAssetStreamedFlat(t *testing.T) {
	testlog.Long(t, "moves 800 MB through NATS and HTTP")
	const size = 200 << 20
	srv := natstest.Start(t)
	h := sha256.New()
	_, err := io.Copy(h, newPatterned(size))
	require.NoError(t, err)
	sum := hex.EncodeToString(h.Sum(nil))
	name := messages.AssetObjectName(sum)
	putObject(t, srv.JS, name, "image/png", newPatterned(size))

	cs, err := New(srv.NC, Options{Users: testUsers(), AssetMaxSize: 256 << 20})
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	runtime.GC()
	base := heapInuse()
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), heapInuse()))
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, web.URL+"/api/assets/"+name, nil)
			resp, err := http.DefaultClient.Do(authed(req))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			if err == nil && (resp.StatusCode != http.StatusOK || n != size || hex.EncodeToString(h.Sum(nil)) != sum ||
				resp.Header.Get("Content-Length") != strconv.Itoa(size) || resp.Header.Get("Content-Security-Policy") != assetCSP) {
				err = io.ErrUnexpectedEOF
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(done)
	<-sampled
	close(errs)
	for err := range errs {
		require.NoError(t, err, "a fetch got the whole object, right")
	}
	grew := int64(peak.Load()) - int64(base)
	t.Logf("three concurrent fetches of a %d MB object: heap in use %d MB before, %d MB at most (+%d MB)", size>>20, base>>20, peak.Load()>>20, grew>>20)
	require.Less(t, grew, int64(100<<20), "the console's heap grew by %d MB", grew>>20)

	small, err := New(srv.NC, Options{Users: testUsers()})
	require.NoError(t, err)
	t.Cleanup(small.Close)
	r := httptest.NewRequest(http.MethodGet, "/api/assets/"+name, nil)
	r.Host = "127.0.0.1"
	w := httptest.NewRecorder()
	small.Handler().ServeHTTP(w, authed(r))
	require.Equal(t, http.StatusBadGateway, w.Code)
	require.Contains(t, w.Body.String(), "over the 16777216-byte limit")
}

// TestTamperedAssetRefused: content a worker credential put under another
// content's name is never served whole: the response is cut off (the
// reader sees an error and less than the content, however short), the
// abort is logged and counted.
func TestTamperedAssetRefused(t *testing.T) {
	srv := natstest.Start(t)
	log, rec := testlog.New(t)
	reg := prometheus.NewRegistry()
	cs, err := New(srv.NC, Options{Users: testUsers(), Logger: log, Registerer: reg})
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	for i, forged := range [][]byte{[]byte("x"), bytes.Repeat([]byte("<svg>forged</svg>"), 20_000)} {
		real := sha256.Sum256([]byte("the picture the name says"))
		name := messages.AssetObjectName(hex.EncodeToString(real[:]))
		if i > 0 {
			other := sha256.Sum256([]byte("another picture"))
			name = messages.AssetObjectName(hex.EncodeToString(other[:]))
		}
		putObject(t, srv.JS, name, "image/svg+xml", bytes.NewReader(forged))
		req, _ := http.NewRequest(http.MethodGet, web.URL+"/api/assets/"+name, nil)
		var body []byte
		resp, err := http.DefaultClient.Do(authed(req))
		if err == nil { // the headers came; the body is cut off
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		require.Error(t, err, "%d bytes: the reader sees an error", len(forged))
		require.Less(t, len(body), len(forged), "never the whole forged content")
		t.Logf("%d forged bytes: %d sent, then %v", len(forged), len(body), err)
		require.EqualValues(t, i+1, testutil.ToFloat64(cs.m.assetAborts.WithLabelValues("changed")))
	}
	require.Equal(t, 2, rec.Count("console: asset response aborted", "reason=changed"))
	// The right content under its name is served.
	good := []byte("the picture the name says")
	sum := sha256.Sum256(good)
	name := messages.AssetObjectName(hex.EncodeToString(sum[:]))
	// (An operator removes the forged one: a purge of its info, as nats
	// object rm would need a roll-up, which the store refuses.)
	st, err := srv.JS.Stream(t.Context(), "OBJ_"+messages.BucketAssets)
	require.NoError(t, err)
	require.NoError(t, st.Purge(t.Context(), jetstream.WithPurgeSubject(bus.ObjectInfoSubject(messages.BucketAssets, name))))
	putObject(t, srv.JS, name, "image/svg+xml", bytes.NewReader(good))
	req, _ := http.NewRequest(http.MethodGet, web.URL+"/api/assets/"+name, nil)
	resp, err := http.DefaultClient.Do(authed(req))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, good, body)
	require.Equal(t, "image/svg+xml", resp.Header.Get("Content-Type"))
}
