package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// Options configures a run.
type Options struct {
	// Quick runs fewer iterations and smaller plans (under 2 minutes).
	Quick bool
	// Out receives the table.
	Out io.Writer
	// DocsDir receives performance.md and performance-scale.svg ("" to skip).
	DocsDir string
	// Self is the path of the running executable, re-run as the NATS server.
	Self string
	// Only runs just these figures (e.g. "1,4"); empty runs all.
	Only string
}

// ServerProfileEnv names the file the nats-server child writes its CPU
// profile to (unset: no profile).
const ServerProfileEnv = "NARRATORIA_BENCH_SERVER_CPUPROFILE"

// servers counts the nats-server children started in this run.
var servers atomic.Int32

// ServeNATS runs an embedded nats-server until stdin closes (the child
// process of a benchmark run), printing its URL.
func ServeNATS(dir string, nodes int) error {
	servers, err := serveNodes(dir, nodes)
	if err != nil {
		return err
	}
	if path := os.Getenv(ServerProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	fmt.Println(strings.Join(urls, ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, s := range servers {
		s.Shutdown()
		s.WaitForShutdown()
	}
	return nil
}

// serveNodes starts one node, or a cluster of n routed nodes on loopback
// (each with its own store under dir), in this process: the CPU of every
// node is this process's.
func serveNodes(dir string, n int) ([]*server.Server, error) {
	if n <= 1 {
		s, err := embedded.Start(embedded.Options{Port: -1, StoreDir: dir})
		if err != nil {
			return nil, err
		}
		return []*server.Server{s}, nil
	}
	ports := make([]int, n)
	var routes []*url.URL
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	var out []*server.Server
	for i := range n {
		s, err := server.NewServer(&server.Options{ServerName: fmt.Sprintf("bench-n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), MaxPayload: embedded.MaxPayloadDefault,
			NoSigs: true, NoLog: true, Cluster: server.ClusterOpts{Name: "narratoria-bench", Host: "127.0.0.1", Port: ports[i]}, Routes: routes})
		if err != nil {
			return nil, err
		}
		go s.Start()
		out = append(out, s)
	}
	for _, s := range out {
		if !s.ReadyForConnections(embedded.ReadyTimeoutDefault) {
			return nil, fmt.Errorf("node %s not ready", s.Name())
		}
	}
	return out, nil
}

type env struct {
	// replicas is 1 (one nats-server node) or 3 (a 3-node cluster on
	// loopback, every stream and bucket R3).
	replicas int
	// orch is figure 5's throughput (tools/s), for the R3 comparison.
	orch float64
	// serverPID is the nats-server child's process ID (its CPU is read
	// from /proc for the per-tool budget).
	serverPID int
	sch       *scheduler.Scheduler
	opts      Options
	url       string
	nc        *nats.Conn
	js        jetstream.JetStream
	bus       bus.Config
	dir       string
	script    string
	stop      []func()
	rows      []Row
	curves    map[string][][2]float64 // shape -> (N, per-tool µs)
	inproc    *runner.InProcessRunner
	released  chan struct{}
	fig2      time.Duration
	// flame is the flame graph SVG of figure 5 (nil when not drawn).
	flame []byte
}

const trivialScript = "#!/bin/sh\necho '{\"version\":\"0\",\"type\":\"done\",\"ok\":true,\"output\":{\"narration\":\"ok\"}}'\n"

// newEnv returns an environment not started yet, on a server of so many
// nodes.
func newEnv(o Options, replicas int) *env {
	return &env{opts: o, replicas: replicas, curves: map[string][][2]float64{}, released: make(chan struct{})}
}

// Run measures every figure and prints the table.
func Run(ctx context.Context, o Options) error {
	e := newEnv(o, 1)
	defer e.close()
	if err := e.start(); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "machine: %d cores, %s, nats-server %s, %s/%s\n\n", runtime.NumCPU(), runtime.Version(), server.VERSION, runtime.GOOS, runtime.GOARCH)
	steps := []struct {
		id string
		fn func(context.Context) error
	}{{"1", e.figure1and2}, {"3", e.figure3}, {"4", e.figure4}, {"5", e.figure5}, {"6", e.figure6}, {"7", e.figure7}, {"8", e.figure8}, {"9", e.figure9Apart}, {"10", e.figure10}, {"11", e.figure11}, {"12", e.figure12}}
	for _, st := range steps {
		if o.Only != "" && !strings.Contains(","+o.Only+",", ","+st.id+",") {
			continue
		}
		if st.id == "3" && e.fig2 == 0 {
			e.fig2 = time.Nanosecond // figure 3 compares with figure 2; run "1,3" for a real ratio
		}
		run := st.fn
		if st.id == "5" && o.DocsDir != "" {
			run = e.withFlameGraph(run)
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "figure %s…\n", st.id)
		if err := run(ctx); err != nil {
			return fmt.Errorf("figure %s: %w", st.id, err)
		}
		fmt.Fprintf(os.Stderr, "figure %s done in %s\n", st.id, time.Since(start).Round(time.Millisecond))
	}
	if o.Only == "" || strings.Contains(","+o.Only+",", ",r3,") {
		e.close() // the single node's components leave the CPU to the cluster's
		if err := e.replicated(ctx); err != nil {
			return fmt.Errorf("R3: %w", err)
		}
	}
	e.print(o.Out)
	if o.DocsDir != "" {
		return e.writeDocs()
	}
	return nil
}

// close stops what start started, in reverse order.
func (e *env) close() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
	e.stop = nil
}

// replicated measures figures 1, 5 and 9 again on a 3-node cluster on
// loopback (every stream and bucket R3, the three nodes in one child
// process whose CPU figure 9 counts), and puts each row next to its
// single-node row, with R3's orchestration throughput against R1's.
func (e *env) replicated(ctx context.Context) error {
	r3 := newEnv(e.opts, 3)
	defer r3.close()
	if err := r3.start(); err != nil {
		return err
	}
	for _, fig := range []func(context.Context) error{r3.figure1and2, r3.figure5, r3.figure9} {
		if err := fig(ctx); err != nil {
			return err
		}
	}
	var rows []Row
	for _, r := range e.rows {
		rows = append(rows, r)
		num := strings.Fields(r.Figure)[0]
		for _, x := range r3.rows {
			if strings.Fields(x.Figure)[0] == num {
				x.Figure = "R3: " + x.Figure
				rows = append(rows, x)
			}
		}
		if num == "5" && e.orch > 0 && r3.orch > 0 {
			ratio := r3.orch / e.orch
			rows = append(rows, Row{Figure: "5r R3 orchestration throughput against R1 (figure 5, same plan)", Value: fmt.Sprintf("%.0f tools/s", r3.orch),
				Baseline: fmt.Sprintf("R1: %.0f tools/s", e.orch), Ratio: fmt.Sprintf("%.2f×", ratio), Target: "≥ 0.5×", Met: ratio >= 0.5})
		}
	}
	if len(rows) == len(e.rows) { // the single-node figures were not run: the R3 rows alone
		for _, x := range r3.rows {
			x.Figure = "R3: " + x.Figure
			rows = append(rows, x)
		}
	}
	e.rows = rows
	return nil
}

func (e *env) start() error {
	dir, err := os.MkdirTemp("", "narratoria-bench-")
	if err != nil {
		return err
	}
	// A root worker runs each script as a user of its own, which must
	// reach the skills folder.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	e.dir = dir
	e.stop = append(e.stop, func() { _ = os.RemoveAll(dir) })
	child := exec.Command(e.opts.Self, "serve-nats", filepath.Join(dir, "js"), strconv.Itoa(max(e.replicas, 1)))
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	child.Stderr = os.Stderr
	if path := os.Getenv(ServerProfileEnv); path != "" {
		// Each server of the run profiles itself to a file of its own:
		// <file>.server, then <file>.server2 (figure 9's own), and so on.
		if n := servers.Add(1); n > 1 {
			child.Env = append(os.Environ(), ServerProfileEnv+"="+path+strconv.Itoa(int(n)))
		}
	}
	if err := child.Start(); err != nil {
		return fmt.Errorf("start nats child: %w", err)
	}
	e.serverPID = child.Process.Pid
	e.stop = append(e.stop, func() { _ = stdin.Close(); _ = child.Wait() })
	buf := make([]byte, 256)
	n, err := stdout.Read(buf)
	if err != nil {
		return fmt.Errorf("nats child: %w", err)
	}
	e.url = strings.TrimSpace(string(buf[:n]))
	e.bus = bus.Config{URL: e.url, MemoryStorage: false, Replicas: max(e.replicas, 1)}.WithDefaults()
	if e.nc, err = nats.Connect(e.url); err != nil {
		return err
	}
	e.stop = append(e.stop, e.nc.Close)
	if e.js, err = jetstream.New(e.nc); err != nil {
		return err
	}
	// A new cluster elects its JetStream meta leader first: provisioning
	// is tried again until it has one.
	for try := 0; ; try++ {
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := bus.Provision(pctx, e.js, e.bus)
		cancel()
		if err == nil {
			break
		}
		if try == 30 {
			return fmt.Errorf("provision: %w", err)
		}
		time.Sleep(time.Second)
	}
	// skills: "sh" (a trivial POSIX sh script, run as the worker's
	// defaults confine it), "shu" (the same, unconfined) and "inproc" (a
	// Go function)
	for _, name := range []string{"sh", "shu", "inproc"} {
		sd := filepath.Join(dir, "skills", name)
		if err := os.MkdirAll(filepath.Join(sd, "scripts"), 0o755); err != nil {
			return err
		}
		man := fmt.Sprintf(`{"name":%q,"version":"1.0.0","description":"bench","keywords":["bench%s"],"scripts":[{"name":"run","path":"scripts/run"}]}`, name, name)
		if err := os.WriteFile(filepath.Join(sd, "skill.json"), []byte(man), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(sd, "scripts", "run"), []byte(trivialScript), 0o755); err != nil {
			return err
		}
	}
	e.script = filepath.Join(dir, "skills", "sh", "scripts", "run")
	e.inproc = runner.NewInProcess()
	e.inproc.Register("inproc", "run", func(ctx context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
		if strings.Contains(string(in.Input), `"wait"`) {
			select {
			case <-e.released:
			case <-ctx.Done():
			}
		}
		return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"narration":"ok"}`)})
	})
	log := slog.New(slog.DiscardHandler)
	sch, err := scheduler.New(e.conn(), schedulerConfig("bench-in-process"), scheduler.Options{Logger: log, Bus: e.bus})
	if err != nil {
		return err
	}
	if err := sch.Start(context.Background()); err != nil {
		return err
	}
	e.stop = append(e.stop, sch.Stop)
	e.sch = sch
	for !sch.OwnsAll() {
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.worker("inproc", e.inproc, 64); err != nil {
		return err
	}
	if err := e.worker("sh", nil, runtime.NumCPU()); err != nil {
		return err
	}
	// Unconfined: the worker's own user, no Landlock (the kernel limits
	// stay: they cost a few system calls).
	if err := e.worker("shu", &runner.ProcessRunner{}, runtime.NumCPU()); err != nil {
		return err
	}
	nar, err := narrator.New(e.conn(), narrator.Config{Sessions: 256}, narrator.Options{Logger: log, Bus: e.bus})
	if err != nil {
		return err
	}
	if err := nar.Start(context.Background()); err != nil {
		return err
	}
	e.stop = append(e.stop, nar.Stop)
	return nil
}

func (e *env) conn() *nats.Conn {
	nc, err := nats.Connect(e.url)
	if err != nil {
		panic(err)
	}
	e.stop = append(e.stop, nc.Close)
	return nc
}

func (e *env) worker(skill string, r runner.Runner, conc int) error {
	w, err := skillworker.New(e.conn(), skillworker.Config{SkillsDir: filepath.Join(e.dir, "skills"), Skills: []string{skill}, Concurrency: conc, WatchInterval: -1},
		skillworker.Options{Logger: slog.New(slog.DiscardHandler), Runner: r, Bus: e.bus})
	if err != nil {
		return err
	}
	if err := w.Start(context.Background()); err != nil {
		return err
	}
	e.stop = append(e.stop, w.Stop)
	return nil
}

func (e *env) iterations(quick, full int) int {
	if e.opts.Quick {
		return quick
	}
	return full
}

// plan builds a plan of n tools of a skill in a shape: chain, wide or
// diamond (layers of 10, each tool depending on the whole layer before).
func plan(skill, shape string, n int, input string) *messages.Plan {
	p := &messages.Plan{RequestID: uuid.NewString(), DisabledSkills: []string{}, Metadata: messages.PlanMetadata{GenerationAttempt: 1},
		Parallel: shape != "chain", TimeoutMs: 600_000}
	if input == "" {
		input = "{}"
	}
	for i := range n {
		t := messages.Tool{ToolID: "t" + strconv.Itoa(i), ToolPath: skill + "/run", Input: json.RawMessage(input), Dependencies: []string{},
			Required: true, Async: true, RetryPolicy: messages.RetryPolicy{MaxRetries: 0, BackoffMs: 100}}
		switch shape {
		case "chain":
			if i > 0 {
				t.Dependencies = []string{"t" + strconv.Itoa(i-1)}
			}
		case "diamond":
			layer := i / 10
			if layer > 0 {
				for j := (layer - 1) * 10; j < layer*10; j++ {
					t.Dependencies = append(t.Dependencies, "t"+strconv.Itoa(j))
				}
			}
		}
		p.Tools = append(p.Tools, t)
	}
	return p
}

// runPlan publishes a plan and waits for its result.
func (e *env) runPlan(ctx context.Context, session string, p *messages.Plan) (*messages.ExecutionResult, time.Duration, error) {
	sub, err := e.nc.SubscribeSync(fmt.Sprintf("narratoria.results.%s.%s", session, p.RequestID))
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, _ := json.Marshal(p)
	start := time.Now()
	if _, err := e.js.Publish(ctx, "narratoria.plans."+session, b); err != nil {
		return nil, 0, err
	}
	m, err := sub.NextMsg(10 * time.Minute)
	if err != nil {
		return nil, 0, fmt.Errorf("plan %s: %w", p.RequestID, err)
	}
	d := time.Since(start)
	var res messages.ExecutionResult
	if err := codec.Unmarshal(m.Data, &res); err != nil { // as pkg/client decodes results
		return nil, 0, err
	}
	if !res.Success {
		return &res, d, fmt.Errorf("plan %s failed: %s %s", p.RequestID, res.FailureReason, res.Message)
	}
	return &res, d, nil
}

// rawRoundTrip is baseline 1: publish to a work queue, fetch, ack, publish
// a reply, receive it.
func (e *env) rawRoundTrip(ctx context.Context, n int) (sample, error) {
	one, done, err := e.rawRig(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var s sample
	for i := range n + n/10 {
		d, err := one(ctx)
		if err != nil {
			return nil, err
		}
		if i >= n/10 { // warm-up excluded
			s = append(s, d)
		}
	}
	return s, nil
}

// rawRig sets up the raw JetStream round trip (a work queue, a consumer
// that acks and replies) and returns one round trip, to be measured
// alone or interleaved with what it is the baseline of.
func (e *env) rawRig(ctx context.Context) (one func(context.Context) (time.Duration, error), done func(), err error) {
	name := "BENCH_RAW_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench.raw." + name}, Retention: jetstream.WorkQueuePolicy,
		Replicas: e.bus.Replicas})
	if err != nil {
		return nil, nil, err
	}
	cleanup := []func(){func() { _ = e.js.DeleteStream(context.Background(), name) }}
	done = func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		done()
		return nil, nil, err
	}
	wnc := e.conn()
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		done()
		return nil, nil, err
	}
	cleanup = append(cleanup, it.Stop)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			_ = m.Ack()
			_ = wnc.Publish("bench.reply."+name, m.Data())
		}
	}()
	sub, err := e.nc.SubscribeSync("bench.reply." + name)
	if err != nil {
		done()
		return nil, nil, err
	}
	cleanup = append(cleanup, func() { _ = sub.Unsubscribe() })
	payload := make([]byte, 400)
	one = func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		if _, err := e.js.Publish(ctx, "bench.raw."+name, payload); err != nil {
			return 0, err
		}
		if _, err := sub.NextMsg(10 * time.Second); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	return one, done, nil
}

// jobRoundTrip measures a skill worker alone: a ToolJob published on the
// work queue until its Outcome arrives (the worker stores it before acking).
func (e *env) jobRoundTrip(ctx context.Context, n int) (sample, error) {
	sub, err := e.nc.SubscribeSync("narratoria.outcomes.jobrt.>")
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	var s sample
	for i := range n + n/10 {
		plan := uuid.NewString()
		j, _ := json.Marshal(messages.ToolJob{PlanID: plan, SessionID: "jobrt", ToolID: "t", Skill: "inproc", Script: "run",
			Attempt: 1, Input: json.RawMessage(`{}`), State: json.RawMessage(`{}`), DispatchedAt: time.Now()})
		start := time.Now()
		if _, err := e.js.Publish(ctx, "narratoria.jobs.inproc."+plan+".t", j); err != nil {
			return nil, err
		}
		if _, err := sub.NextMsg(10 * time.Second); err != nil {
			return nil, fmt.Errorf("job round trip: %w", err)
		}
		if i >= n/10 {
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}

// rawExec is the floor of running the script: os/exec, read stdout, wait.
func rawExec(script string) (time.Duration, error) {
	start := time.Now()
	cmd := exec.Command(script)
	cmd.Stdin = strings.NewReader(`{"input":{}}`)
	out, err := cmd.Output()
	if err != nil || len(out) == 0 {
		return 0, fmt.Errorf("raw exec: %v", err)
	}
	return time.Since(start), nil
}

// settle lets what the last measurement left running (acks, a finished
// plan's purge) finish before the next one starts, so neither a plan nor
// its baseline is measured in the other's wake.
func settle() { time.Sleep(3 * time.Millisecond) }

// alternate measures each of fns in turn, n times after n/10 rounds of
// warm-up, each after settle, and returns one sample per fn.
func alternate(n int, fns ...func() (time.Duration, error)) ([]sample, error) {
	out := make([]sample, len(fns))
	for i := range n + n/10 {
		for k, fn := range fns {
			settle()
			d, err := fn()
			if err != nil {
				return nil, err
			}
			if i >= n/10 {
				out[k] = append(out[k], d)
			}
		}
	}
	return out, nil
}

func (e *env) figure1and2(ctx context.Context) error {
	n := e.iterations(200, 1000)
	one, done, err := e.rawRig(ctx)
	if err != nil {
		return err
	}
	defer done()
	// Each plan is measured next to a raw round trip (and, for the sh
	// step, a raw exec), alternating, so the ratio compares the same
	// moments of a noisy machine.
	rawOne := func() (time.Duration, error) { return one(ctx) }
	planOf := func(skill string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			_, d, err := e.runPlan(ctx, "lat", plan(skill, "wide", 1, ""))
			return d, err
		}
	}
	s1, err := alternate(n, rawOne, planOf("inproc"))
	if err != nil {
		return err
	}
	raw, in := s1[0], s1[1]
	job, err := e.jobRoundTrip(ctx, n)
	if err != nil {
		return err
	}
	rj := float64(job.p(0.5)) / float64(raw.p(0.5))
	e.rows = append(e.rows, Row{Figure: "1w one job through a skill worker, in-process runner (job published → outcome received; p50 / p99)",
		Value: ms(job.p(0.5)) + " / " + ms(job.p(0.99)), Baseline: "raw JetStream round trip " + ms(raw.p(0.5)),
		Ratio: fmt.Sprintf("%.2f×", rj), Target: "≤ 2×", Met: rj <= 2})
	r1 := float64(in.p(0.5)) / float64(raw.p(0.5))
	e.rows = append(e.rows, Row{Figure: "1 one-tool plan, in-process runner (p50 / p99)", Value: ms(in.p(0.5)) + " / " + ms(in.p(0.99)),
		Baseline: "raw JetStream round trip " + ms(raw.p(0.5)) + " / " + ms(raw.p(0.99)), Ratio: fmt.Sprintf("%.2f×", r1), Target: "≤ 3×", Met: r1 <= 3})
	s2, err := alternate(n/2, rawOne, func() (time.Duration, error) { return rawExec(e.script) }, planOf("sh"))
	if err != nil {
		return err
	}
	raw2, ex, sh := s2[0], s2[1], s2[2]
	base := raw2.p(0.5) + ex.p(0.5)
	r2 := float64(sh.p(0.5)) / float64(base)
	e.rows = append(e.rows, Row{Figure: "2 one-tool plan, sh script, process runner (p50 / p99)", Value: ms(sh.p(0.5)) + " / " + ms(sh.p(0.99)),
		Baseline: fmt.Sprintf("raw round trip + raw os/exec %s (exec alone %s)", ms(base), ms(ex.p(0.5))), Ratio: fmt.Sprintf("%.2f×", r2), Target: "≤ 1.6×", Met: r2 <= 1.6})
	e.fig2 = sh.p(0.5)
	return nil
}

func (e *env) figure3(ctx context.Context) error {
	n := e.iterations(100, 500)
	var s sample
	for i := range n + n/10 {
		body := fmt.Sprintf(`{"sessionId":"p%d","text":"benchsh"}`, i%50)
		start := time.Now()
		m, err := e.nc.RequestWithContext(ctx, "narratoria.narrate", []byte(body))
		if err != nil {
			return fmt.Errorf("figure 3: %w", err)
		}
		if m.Header.Get("Nats-Service-Error") != "" {
			return fmt.Errorf("figure 3: %s", m.Header.Get("Nats-Service-Error"))
		}
		if i >= n/10 {
			s = append(s, time.Since(start))
		}
	}
	r := float64(s.p(0.5)) / float64(e.fig2)
	e.rows = append(e.rows, Row{Figure: "3 prompt → narration, rule-based planner, one sh step (p50 / p99)", Value: ms(s.p(0.5)) + " / " + ms(s.p(0.99)),
		Baseline: "figure 2 " + ms(e.fig2), Ratio: fmt.Sprintf("%.2f×", r), Target: "≤ 1.5×", Met: r <= 1.5})

	// prompts/s with 100 sessions narrating at once (in-process tool)
	const sessions = 100
	per := e.iterations(3, 10)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				m, err := e.nc.RequestWithContext(ctx, "narratoria.narrate", []byte(fmt.Sprintf(`{"sessionId":"many%d","text":"benchinproc"}`, i)))
				if err != nil || m.Header.Get("Nats-Service-Error") != "" {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	rate := float64(sessions*per) / time.Since(start).Seconds()
	e.rows = append(e.rows, Row{Figure: "3b prompts/s, 100 sessions at once, one in-process step each", Value: fmt.Sprintf("%.0f prompts/s (%d failed)", rate, failed.Load()),
		Baseline: "—", Ratio: "—", Target: "all narrated", Met: failed.Load() == 0})
	return e.figure3c(ctx, rate)
}

// figure3c is the tail latency under load: one-step prompts (in-process
// tool) sent open-loop at half the maximum rate figure 3b measured, spread
// over sessions; p99 against p50 of the same run.
func (e *env) figure3c(ctx context.Context, maxRate float64) error {
	rate := maxRate / 2
	total := int(rate * float64(e.iterations(3, 10)))
	interval := time.Duration(float64(time.Second) / rate)
	var mu sync.Mutex
	var s sample
	var failed atomic.Int64
	var wg sync.WaitGroup
	next := time.Now()
	for i := range total {
		time.Sleep(time.Until(next))
		next = next.Add(interval)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			m, err := e.nc.RequestWithContext(ctx, "narratoria.narrate", []byte(fmt.Sprintf(`{"sessionId":"half%d","text":"benchinproc"}`, i%200)))
			if err != nil || m.Header.Get("Nats-Service-Error") != "" {
				failed.Add(1)
				return
			}
			mu.Lock()
			s = append(s, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(s) == 0 {
		return fmt.Errorf("figure 3c: no prompt narrated (%d failed)", failed.Load())
	}
	r := float64(s.p(0.99)) / float64(s.p(0.5))
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("3c one-step prompt at half the maximum rate (%.0f prompts/s open-loop, %d prompts; p50 / p99)", rate, total),
		Value: ms(s.p(0.5)) + " / " + ms(s.p(0.99)), Baseline: "its own p50", Ratio: fmt.Sprintf("p99 %.2f× p50", r), Target: "p99 ≤ 4× p50",
		Met: r <= 4 && failed.Load() == 0, Note: fmt.Sprintf("%d failed", failed.Load())})
	return nil
}

func (e *env) figure4(ctx context.Context) error {
	plans := e.iterations(2, 5)
	// raw: the same number of scripts with the same parallelism
	raw := func(par int) float64 {
		var done atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range par {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Add(1) <= int64(plans*100) {
					_, _ = rawExec(e.script)
				}
			}()
		}
		wg.Wait()
		return float64(plans*100) / time.Since(start).Seconds()
	}
	ours := func(skill string) (float64, error) {
		start := time.Now()
		for range plans {
			if _, _, err := e.runPlan(ctx, "thr", plan(skill, "wide", 100, "")); err != nil {
				return 0, err
			}
		}
		return float64(plans*100) / time.Since(start).Seconds(), nil
	}
	confinement := "confined as the defaults have it: " + confinedAs()
	for _, c := range []struct {
		skill, label string
		workers      int
	}{{"shu", "unconfined (the worker's user, no Landlock)", 1}, {"sh", confinement, 1}, {"sh", confinement, 2}} {
		if c.workers == 2 {
			if err := e.worker("sh", nil, runtime.NumCPU()); err != nil {
				return err
			}
		}
		par := c.workers * runtime.NumCPU()
		got, err := ours(c.skill)
		if err != nil {
			return err
		}
		base := raw(par)
		r := got / base
		e.rows = append(e.rows, Row{Figure: fmt.Sprintf("4 script throughput, %d worker(s), plans of 100 sh tools, %s", c.workers, c.label), Value: fmt.Sprintf("%.0f tools/s", got),
			Baseline: fmt.Sprintf("raw os/exec loop ×%d: %.0f/s", par, base), Ratio: fmt.Sprintf("%.2f×", r), Target: "≥ 0.8×", Met: r >= 0.8})
	}
	return nil
}

// confinedAs says what the default worker confines a script with on this
// machine.
func confinedAs() string {
	var on []string
	if os.Geteuid() == 0 {
		on = append(on, "a user and PID namespace of its own")
	}
	if runner.LandlockABI() > 0 {
		on = append(on, "Landlock")
	}
	return strings.Join(append(on, "kernel limits"), ", ")
}

func (e *env) figure5(ctx context.Context) error {
	// One run of the plan takes under a second, and varied by half from run
	// to run (a first run on a fresh server is slower): the full figure
	// reports the median of five.
	size, reps := e.iterations(1000, 5000), e.iterations(1, 5)
	rates := make([]float64, 0, reps)
	for range reps {
		_, d, err := e.runPlan(ctx, "orch", plan("inproc", "wide", size, ""))
		if err != nil {
			return err
		}
		rates = append(rates, float64(size)/d.Seconds())
	}
	ours := median(rates)
	e.orch = ours
	medianNote := ""
	if reps > 1 {
		medianNote = fmt.Sprintf(" (median of %d runs: %s)", reps, runsOf(rates))
	}
	// raw: work-queue throughput with the same message size as a job
	name := "BENCH_THR_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench.thr." + name}, Retention: jetstream.WorkQueuePolicy,
		Replicas: e.bus.Replicas})
	if err != nil {
		return err
	}
	defer func() { _ = e.js.DeleteStream(context.Background(), name) }()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	job, _ := json.Marshal(messages.ToolJob{PlanID: uuid.NewString(), SessionID: "orch", ToolID: "t123", Skill: "inproc", Script: "run", Attempt: 1,
		Input: json.RawMessage(`{}`), State: json.RawMessage(`{}`), TimeoutMs: 30000, DispatchedAt: time.Now()})
	start := time.Now()
	for range size {
		if _, err := e.js.PublishAsync("bench.thr."+name, job); err != nil {
			return err
		}
	}
	<-e.js.PublishAsyncComplete()
	got := 0
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	for got < size {
		m, err := it.Next()
		if err != nil {
			return err
		}
		_ = m.Ack()
		got++
	}
	it.Stop()
	raw := float64(size) / time.Since(start).Seconds()
	r := ours / raw
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("5 orchestration throughput, in-process runner, wide plan of %d", size), Value: fmt.Sprintf("%.0f tools/s%s", ours, medianNote),
		Baseline: fmt.Sprintf("raw work-queue publish+consume+ack: %.0f msgs/s", raw), Ratio: fmt.Sprintf("%.2f×", r), Target: "≥ 0.15×", Met: r >= 0.15})
	return nil
}

// median is the middle of values (the upper one of an even count).
func median(values []float64) float64 {
	s := slices.Sorted(slices.Values(values))
	return s[len(s)/2]
}

// runsOf lists what every run of a figure measured, in the order they ran.
func runsOf(values []float64) string {
	all := make([]string, len(values))
	for i, v := range values {
		all[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(all, ", ")
}

func (e *env) figure6(ctx context.Context) error {
	sizes := []int{10, 100, 1000, 10_000}
	if e.opts.Quick {
		sizes = []int{10, 100, 1000}
	}
	// The chain's baseline: raw round trips before and after the curves.
	rawBefore, err := e.rawRoundTrip(ctx, e.iterations(100, 500))
	if err != nil {
		return err
	}
	worst := 0.0
	for _, shape := range []string{"chain", "wide", "diamond"} {
		var first float64
		for _, n := range sizes {
			_, d, err := e.runPlan(ctx, "scale", plan("inproc", shape, n, ""))
			if err != nil {
				return err
			}
			per := float64(d.Microseconds()) / float64(n)
			e.curves[shape] = append(e.curves[shape], [2]float64{float64(n), per})
			if first == 0 {
				first = per
			}
			worst = max(worst, per/first)
		}
	}
	var parts []string
	for _, shape := range []string{"chain", "wide", "diamond"} {
		c := e.curves[shape]
		parts = append(parts, fmt.Sprintf("%s %.0f→%.0f µs/tool", shape, c[0][1], c[len(c)-1][1]))
	}
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("6 scale curve, N = %d…%d", sizes[0], sizes[len(sizes)-1]), Value: strings.Join(parts, "; "),
		Baseline: "per-tool cost at N = 10", Ratio: fmt.Sprintf("worst %.2f×", worst), Target: "flat within 2×", Met: worst <= 2})
	// A chain's cost per step against the raw round trip.
	rawAfter, err := e.rawRoundTrip(ctx, e.iterations(100, 500))
	if err != nil {
		return err
	}
	raw := append(rawBefore, rawAfter...)
	rt := float64(raw.p(0.5).Microseconds())
	var steps []string
	worstStep := 0.0
	for _, pt := range e.curves["chain"] {
		steps = append(steps, fmt.Sprintf("%.0f µs", pt[1]))
		worstStep = max(worstStep, pt[1]/rt)
	}
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("6c chain, cost per step, N = %d…%d", sizes[0], sizes[len(sizes)-1]), Value: strings.Join(steps, " / "),
		Baseline: "raw JetStream round trip " + ms(raw.p(0.5)), Ratio: fmt.Sprintf("worst %.2f×", worstStep), Target: "≤ 2×", Met: worstStep <= 2})
	return nil
}

func (e *env) figure7(ctx context.Context) error {
	n := e.iterations(2000, 10_000)
	// Plans whose one tool waits for a release: all stay in flight at once.
	// The cost per plan is the slope of live memory (heap + goroutine
	// stacks, after a GC) between n/2 and n plans in flight, so memory the
	// process held for other reasons does not count.
	sub, err := e.nc.SubscribeSync("narratoria.results.mem.*")
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	live := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc + m.StackInuse)
	}
	publish := func(count, total int) error {
		for range count {
			b, _ := json.Marshal(plan("inproc", "wide", 1, `{"wait":true}`))
			if _, err := e.js.PublishAsync("narratoria.plans.mem", b); err != nil {
				return err
			}
		}
		<-e.js.PublishAsyncComplete()
		// every plan is accepted and in flight (earlier figures' plans are
		// purged meanwhile, so the bucket's key count cannot tell)
		deadline := time.Now().Add(5 * time.Minute)
		for time.Now().Before(deadline) {
			if e.sch.InFlight() >= total {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("figure 7: plans not all in flight")
	}
	if err := publish(n/2, n/2); err != nil {
		return err
	}
	h1 := live()
	if err := publish(n-n/2, n); err != nil {
		return err
	}
	h2 := live()
	perPlan := (h2 - h1) / float64(n-n/2)
	close(e.released)
	got := 0
	for got < n {
		if _, err := sub.NextMsg(5 * time.Minute); err != nil {
			return fmt.Errorf("figure 7: %d of %d results: %w", got, n, err)
		}
		got++
	}
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("7 %d plans in flight at once", n), Value: fmt.Sprintf("%.1f KB per plan, %d/%d results", perPlan/1024, got, n),
		Baseline: "—", Ratio: "—", Target: "≤ 20 KB per plan; none lost", Met: perPlan <= 20*1024 && got == n,
		Note: "slope of heap + stacks of the process running scheduler, narrator and workers; NATS in a child process"})
	return nil
}

// HugePlan is the plan document of figure 8: n tools, each after the tool
// ten before it and one of the seven before it (BenchmarkCheckHuge in
// internal/plancheck measures the same).
func HugePlan(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"requestId":"` + uuid.NewString() + `","parallel":true,"tools":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		deps := "[]"
		if i >= 10 {
			deps = fmt.Sprintf(`["t%d","t%d"]`, i-10, i-1-(i%7))
		}
		fmt.Fprintf(&sb, `{"toolId":"t%d","toolPath":"dice/roll","dependencies":%s}`, i, deps)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

func (e *env) figure8(_ context.Context) error {
	// The largest plan the product accepts (limits.maxTools, 10,000).
	doc := HugePlan(messages.MaxPlanToolsDefault)
	var s sample
	for range e.iterations(5, 15) {
		start := time.Now()
		c, err := plancheck.Check(doc, messages.PlanLimits{}, nil)
		if err != nil {
			return fmt.Errorf("figure 8: %w", err)
		}
		_ = c.Graph.Order()
		s = append(s, time.Since(start))
	}
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("8 validate + sort a %d-tool plan, the largest accepted (median)", messages.MaxPlanToolsDefault), Value: ms(s.p(0.5)), Baseline: "—", Ratio: "—",
		Target: "≤ 100 ms", Met: s.p(0.5) <= 100*time.Millisecond, Note: fmt.Sprintf("%.1f MB document: schema, fields, graph, order", float64(len(doc))/1e6)})
	return nil
}
