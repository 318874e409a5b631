package flame

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
)

// ms is a millisecond of CPU in a CPU profile's unit.
const ms = int64(1e6)

// synthetic is a CPU profile of main calling work (which calls parse, with
// encode inlined into it) and idle: main→work→parse 300 ms of CPU,
// main→work→encode (inlined) 200 ms, main→idle 100 ms.
func synthetic(t *testing.T) *profile.Profile {
	t.Helper()
	fn := func(id uint64, name string) *profile.Function {
		return &profile.Function{ID: id, Name: name, SystemName: name, Filename: name + ".go"}
	}
	main, work, parse, encode, idle := fn(1, "main.main"), fn(2, "example.com/app/internal/work.Run"), fn(3, "encoding/json.(*decodeState).parse"), fn(4, "encoding/json.encode"), fn(5, "runtime.idle")
	loc := func(id uint64, fns ...*profile.Function) *profile.Location {
		l := &profile.Location{ID: id, Address: 0x1000 * id}
		for _, f := range fns {
			l.Line = append(l.Line, profile.Line{Function: f, Line: int64(id)})
		}
		return l
	}
	lMain, lWork, lParse, lEncodeInWork, lIdle := loc(1, main), loc(2, work), loc(3, parse), loc(4, encode, work), loc(5, idle)
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        10_000_000,
		DurationNanos: 2e9,
		Function:      []*profile.Function{main, work, parse, encode, idle},
		Location:      []*profile.Location{lMain, lWork, lParse, lEncodeInWork, lIdle},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lParse, lWork, lMain}, Value: []int64{30, 300 * ms}},
			{Location: []*profile.Location{lEncodeInWork, lMain}, Value: []int64{20, 200 * ms}},
			{Location: []*profile.Location{lIdle, lMain}, Value: []int64{10, 100 * ms}},
		},
	}
	require.NoError(t, p.CheckValid())
	// Through the wire format and back, as the bench does.
	var buf bytes.Buffer
	require.NoError(t, p.Write(&buf))
	parsed, err := profile.Parse(&buf)
	require.NoError(t, err)
	return parsed
}

func TestFold(t *testing.T) {
	t.Parallel()
	root, err := Fold(synthetic(t))
	require.NoError(t, err)
	require.Equal(t, "all", root.Name)
	require.Equal(t, 600*ms, root.Value, "the cpu sample type is summed")
	require.Len(t, root.Children, 1)
	mainF := root.Children[0]
	require.Equal(t, "main.main", mainF.Name)
	require.Equal(t, 600*ms, mainF.Value)
	require.Len(t, mainF.Children, 2)
	work, idle := mainF.Children[0], mainF.Children[1]
	require.Equal(t, "example.com/app/internal/work.Run", work.Name)
	require.Equal(t, 500*ms, work.Value, "an inlined callee's caller is a frame too")
	require.Equal(t, "runtime.idle", idle.Name)
	require.Equal(t, 100*ms, idle.Value)
	names := []string{work.Children[0].Name, work.Children[1].Name}
	require.Equal(t, []string{"encoding/json.(*decodeState).parse", "encoding/json.encode"}, names)
}

// svgFrame is a drawn frame: its tooltip and rectangle.
type svgFrame struct {
	title string
	x, w  float64
}

func TestRenderIsWellFormedAndRootIsWidest(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, Render(&out, synthetic(t), Options{Title: `Figure <5> & "friends"`}))
	d := xml.NewDecoder(bytes.NewReader(out.Bytes()))
	var (
		frames []svgFrame
		texts  []string
		inG    bool
		cur    svgFrame
		elem   string
	)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the SVG must be well-formed XML")
		switch tok := tok.(type) {
		case xml.StartElement:
			elem = tok.Name.Local
			switch elem {
			case "g":
				inG, cur = true, svgFrame{}
			case "rect":
				if inG {
					for _, a := range tok.Attr {
						v, _ := strconv.ParseFloat(a.Value, 64)
						switch a.Name.Local {
						case "x":
							cur.x = v
						case "width":
							cur.w = v
						}
					}
				}
			}
		case xml.CharData:
			switch {
			case inG && elem == "title":
				cur.title += string(tok)
			case elem == "text":
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			if tok.Name.Local == "g" {
				frames = append(frames, cur)
				inG = false
			}
			elem = ""
		}
	}
	require.Len(t, frames, 6, "all, main, work, parse, encode, idle")
	widest := frames[0]
	for _, f := range frames[1:] {
		if f.w > widest.w {
			widest = f
		}
	}
	require.True(t, strings.HasPrefix(widest.title, "all "), "the widest frame is the root, got %q", widest.title)
	require.Contains(t, widest.title, "(600 ms, 100.00%)")
	require.InDelta(t, float64(WidthDefault-2*pad), widest.w, 0.1)
	for _, f := range frames {
		if strings.HasPrefix(f.title, "runtime.idle ") {
			require.InDelta(t, widest.w/6, f.w, 0.1, "width is proportional to samples")
		}
	}
	require.Contains(t, texts, `Figure <5> & "friends"`, "the title is escaped and drawn")
}

func TestRenderEmptyProfile(t *testing.T) {
	t.Parallel()
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}}}
	err := Render(io.Discard, p, Options{})
	require.ErrorIs(t, err, ErrNoSamples)
}

func TestFit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		width float64
		want  string
	}{
		{"main.main", 200, "main.main"},
		{"github.com/narratoria/runtime/internal/scheduler.(*Scheduler).run", 200, "scheduler.(*Scheduler).run"},
		{"github.com/narratoria/runtime/internal/scheduler.(*Scheduler).run", 80, "scheduler.."},
		{"main.main", 10, ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, fit(tt.name, tt.width), "%s in %.0f px", tt.name, tt.width)
	}
}
