package partition

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
)

// The Writer's deterministic simulation: a fixed script of writes goes
// through a Writer over a fakeStream that deals faults from a seed, in a
// testing/synctest bubble. The bubble makes a run depend on its seed only:
// its clock moves only when every goroutine in it (the test, the Writer's
// pump, the fake's answers) is blocked, so the script publishes each burst
// of writes while the clock stands still and the pump waits for the
// stream, and it waits until the pump has settled the burst and stopped
// before the next.
var (
	updateGolden = flag.Bool("update", false, "rewrite testdata/writer_sim.golden from the recorded seeds")
	simSeed      = flag.Uint64("seed", 0, "replay one seed of TestWriterSimulationPromises, printing its transcripts")
	simSeeds     = flag.Int("seeds", 2000, "how many seeds TestWriterSimulationPromises tries (NARRATORIA_LONG: 100,000)")
)

// recordedSeeds are the seeds whose transcripts testdata/writer_sim.golden
// keeps, chosen so that together they meet every fault in every mode it
// can happen in (a stream refuses a write as busy only when replicated),
// a newer fence's refusal among them.
var recordedSeeds = []uint64{14, 22, 25}

// simScript is the writes of every run, in bursts: the first write of a
// burst is published, then the rest at once while the pump is busy with
// the first, and the next burst once all of its writes are settled.
var simScript = []int{1, 3, 1, 8, 2, 12, 1, 5, 3, 16, 2, 6}

// simSubject is the subject of the script's write i: few subjects, so
// that writes of one key follow each other closely.
func simSubject(i int) string { return fmt.Sprintf("w.k.%d", i%3) }

// simMode is how one run's Writer sends.
type simMode struct {
	name       string
	replicated bool
	atomic     bool // the stream allows atomic batches
	ordered    bool
}

var simModes = func() []simMode {
	var out []simMode
	for _, m := range []simMode{{name: "pipelined"}, {name: "one-at-a-time", replicated: true}, {name: "batch", replicated: true, atomic: true}} {
		for _, ordered := range []bool{false, true} {
			m.ordered = ordered
			out = append(out, m)
		}
	}
	return out
}()

func (m simMode) String() string {
	if m.ordered {
		return m.name + "/ordered"
	}
	return m.name + "/unordered"
}

// simRun is what one run saw.
type simRun struct {
	transcript string
	writes     []simWrite
	stored     []storedMsg
	onFail     []error
	onRefused  []string // the refused writes' data, in order
	faults     map[fault]int
}

// simWrite is one write of a run and its fate.
type simWrite struct {
	subject, data string
	settled       bool
	ack           *jetstream.PubAck
	err           error
}

// simPatience bounds how long (on the bubble's clock) a burst may take to
// settle; any write left then is a broken promise.
const simPatience = time.Hour

// simulate runs the script through a Writer in mode over a fake stream
// dealing faults from seed.
func simulate(t *testing.T, seed uint64, mode simMode) simRun {
	var run simRun
	synctest.Test(t, func(t *testing.T) {
		f := newFakeStream(seed, mode.replicated, mode.atomic)
		f.note("seed %d, %s", seed, mode)
		cfg := WriterConfig{Replicated: mode.replicated, Ordered: mode.ordered,
			OnFail: func(err error) {
				run.onFail = append(run.onFail, err)
				f.note("OnFail: %v", err)
			},
			OnRetry: func(err error, failures int) { f.note("OnRetry (failure %d): %v", failures, err) },
			OnRefused: func(m *nats.Msg, err error) {
				run.onRefused = append(run.onRefused, string(m.Data))
				f.note("OnRefused %s: %v", m.Data, err)
			},
		}
		w := newWriter(t.Context(), f, f.fence(), cfg)
		n := 0
	script:
		for _, size := range simScript {
			burst := make([]*Write, size)
			for i := range burst {
				m := nats.NewMsg(simSubject(n))
				m.Data = []byte(fmt.Sprintf("#%d", n))
				run.writes = append(run.writes, simWrite{subject: m.Subject, data: string(m.Data)})
				burst[i] = w.Publish(m)
				n++
				if i == 0 {
					// The pump takes the first write alone and waits for
					// the stream: the rest queue behind it whatever the
					// goroutines' schedule.
					synctest.Wait()
				}
			}
			patience := time.After(simPatience)
			for _, x := range burst {
				select {
				case <-x.Done():
				case <-patience:
					break script
				}
			}
			// The pump stops once the burst is settled.
			synctest.Wait()
			for i, x := range burst {
				s := &run.writes[n-size+i]
				s.settled = true
				s.ack, s.err = x.Wait(t.Context())
				if s.err != nil {
					f.note("write %s: failed: %v", s.data, s.err)
				} else {
					f.note("write %s: stored at %d", s.data, s.ack.Sequence)
				}
			}
		}
		w.Abort()
		run.stored = f.snapshot()
		var b strings.Builder
		for i, m := range run.stored {
			fmt.Fprintf(&b, " %d:%s=%s", i+1, m.subject, m.data)
		}
		f.note("the stream holds%s", b.String())
		run.transcript = f.transcript()
		run.faults = f.faults
	})
	return run
}

// broken returns the promises run breaks (none: nil).
func (run simRun) broken(mode simMode) (out []string) {
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	defer func() {
		// The first few say enough.
		if len(out) > 5 {
			out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
		}
	}()

	at := map[string][]int{} // each write's stream positions
	for i, m := range run.stored {
		at[m.data] = append(at[m.data], i)
	}
	var refused []string
	firstFenced := -1
	for i, x := range run.writes {
		switch {
		case !x.settled:
			bad("write %s never settled", x.data)
			continue
		case x.err == nil:
			// An acknowledged write is stored where the acknowledgement says.
			if x.ack == nil || x.ack.Sequence == 0 || x.ack.Sequence > uint64(len(run.stored)) {
				bad("write %s acknowledged with %+v, outside the stream", x.data, x.ack)
			} else if m := run.stored[x.ack.Sequence-1]; m.data != x.data || m.subject != x.subject {
				bad("write %s acknowledged at %d, which holds %s=%s", x.data, x.ack.Sequence, m.subject, m.data)
			}
			if mode.ordered && firstFenced >= 0 {
				bad("write %s stored after write %s was refused by a newer fence", x.data, run.writes[firstFenced].data)
			}
		case storeRefused(x.err):
			refused = append(refused, x.data)
		case Refused(x.err):
			if firstFenced < 0 {
				firstFenced = i
			}
		case mode.ordered:
			bad("ordered write %s failed for a passing reason, not sent again: %v", x.data, x.err)
		}
	}
	// A store refusal is told to OnRefused, once and in order.
	if fmt.Sprint(refused) != fmt.Sprint(run.onRefused) {
		bad("OnRefused told of %v, the writes the store refused are %v", run.onRefused, refused)
	}
	// OnFail: once, for an ordered Writer a newer fence refused; else never.
	switch {
	case len(run.onFail) > 1:
		bad("OnFail called %d times", len(run.onFail))
	case !mode.ordered && len(run.onFail) > 0:
		bad("OnFail called for an unordered Writer")
	case mode.ordered && firstFenced >= 0 && len(run.onFail) == 0:
		bad("write %s was refused by a newer fence, and OnFail was not called", run.writes[firstFenced].data)
	case mode.ordered && firstFenced < 0 && len(run.onFail) > 0:
		bad("OnFail called (%v) with no write refused by a newer fence", run.onFail[0])
	case len(run.onFail) == 1 && !Refused(run.onFail[0]):
		bad("OnFail called with %v, not a newer fence's refusal", run.onFail[0])
	}
	if !mode.ordered {
		return out
	}
	// An ordered Writer keeps each key's writes in the order they were
	// written: an acknowledged write is last stored after every copy of
	// the key's earlier writes (a write stored again lands after the
	// earlier ones again). A write that failed may end before an earlier
	// one: it is given up.
	earlier := map[string]int{} // subject -> the last position of its writes so far
	for _, x := range run.writes {
		pos := at[x.data]
		if len(pos) == 0 {
			continue
		}
		last := pos[len(pos)-1]
		if e, ok := earlier[x.subject]; ok && x.settled && x.err == nil && last < e {
			bad("write %s of %s last stored at %d, before a copy of an earlier write at %d", x.data, x.subject, last+1, e+1)
		}
		earlier[x.subject] = max(earlier[x.subject], last)
	}
	return out
}

// goldenPath is the file keeping the recorded seeds' transcripts.
var goldenPath = filepath.Join("testdata", "writer_sim.golden")

// TestWriterSimulationGolden replays the recorded seeds in every mode: the
// transcripts must equal testdata/writer_sim.golden byte for byte (go test
// -run TestWriterSimulationGolden -update rewrites it), and a second run of
// each must be the same.
func TestWriterSimulationGolden(t *testing.T) {
	var all strings.Builder
	for _, seed := range recordedSeeds {
		for _, mode := range simModes {
			run := simulate(t, seed, mode)
			if again := simulate(t, seed, mode); again.transcript != run.transcript {
				t.Fatalf("seed %d, %s: a second run differs:\n%s", seed, mode, firstDifference(run.transcript, again.transcript))
			}
			if broken := run.broken(mode); len(broken) > 0 {
				t.Errorf("seed %d, %s: %s", seed, mode, strings.Join(broken, "; "))
			}
			all.WriteString(run.transcript)
			all.WriteString("\n")
		}
	}
	if *updateGolden {
		require.NoError(t, os.MkdirAll(filepath.Dir(goldenPath), 0o755))
		require.NoError(t, os.WriteFile(goldenPath, []byte(all.String()), 0o644))
		return
	}
	want, err := os.ReadFile(goldenPath)
	require.NoError(t, err, "run with -update to record the transcripts")
	if got := all.String(); got != string(want) {
		t.Fatalf("the transcripts differ from %s (if the change is meant, -update rewrites it):\n%s", goldenPath, firstDifference(string(want), got))
	}
}

// firstDifference shows the first line where want and got part.
func firstDifference(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, w, g)
		}
	}
	return "(no difference)"
}

// TestWriterSimulationPromises runs the script in every mode for many
// seeds and checks the Writer's promises after each: every acknowledged
// write stored where its acknowledgement says; an ordered Writer's writes
// of a key stored in order, none acknowledged after a newer fence's
// refusal, none failed for a passing reason; a store refusal failing only
// its write and told to OnRefused; OnFail at most once, and only for a
// newer fence; every write settled. The seeds start from the clock
// (NARRATORIA_SIM_FIXED: from 1); a failing seed replays alone with -seed.
func TestWriterSimulationPromises(t *testing.T) {
	n := *simSeeds
	switch {
	case os.Getenv("NARRATORIA_LONG") != "":
		n = 100_000
	case testlog.Race() && n > 300:
		n = 300 // the race pass watches the pump's goroutines; the full count runs in make test-long
	}
	start := uint64(time.Now().UnixNano())
	if os.Getenv("NARRATORIA_SIM_FIXED") != "" {
		start = 1
	}
	var seeds []uint64
	switch {
	case *simSeed != 0:
		seeds = append(seeds, *simSeed)
	case testing.Short():
		seeds = append(seeds, recordedSeeds...)
	default:
		for k := range uint64(n) {
			seeds = append(seeds, start+k)
		}
	}
	dealt := map[fault]int{}
	for _, seed := range seeds {
		for _, mode := range simModes {
			run := simulate(t, seed, mode)
			if *simSeed != 0 {
				t.Logf("transcript:\n%s", run.transcript)
			}
			for fl, k := range run.faults {
				dealt[fl] += k
			}
			if broken := run.broken(mode); len(broken) > 0 {
				t.Fatalf("seed %d, %s breaks the Writer's promises:\n  %s\nreplay it: go test ./internal/partition -run 'TestWriterSimulationPromises$' -seed %d -v",
					seed, mode, strings.Join(broken, "\n  "), seed)
			}
		}
	}
	if *simSeed == 0 {
		// The simulation tests only what it meets.
		for fl := faultNone; fl <= faultFence; fl++ {
			require.Positive(t, dealt[fl], "no run met %s", fl)
		}
	}
}
