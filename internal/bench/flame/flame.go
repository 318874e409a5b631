// Package flame renders a CPU profile as a flame graph in SVG: each frame
// is a rectangle as wide as the samples it was on the stack for, its
// callers below it and its callees above, with the whole profile ("all")
// at the bottom. It needs no external tool: the profile is read with
// github.com/google/pprof/profile and the SVG written by hand. Hovering a
// frame shows its function, samples and share.
package flame

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// Layout defaults.
const (
	// WidthDefault is the SVG width in pixels.
	WidthDefault = 1200
	// FrameHeightDefault is the height of one frame in pixels.
	FrameHeightDefault = 16
	// MinFrameWidth is the narrowest frame drawn, in pixels; narrower
	// frames (and their callees) are left out.
	MinFrameWidth = 0.3
)

// ErrNoSamples is returned for a profile without samples to draw.
var ErrNoSamples = errors.New("profile has no samples")

// Options configures Render.
type Options struct {
	// Title is drawn above the graph. Default "CPU flame graph".
	Title string
	// Subtitle is a line of notes under the title. Default: the sample
	// count and duration.
	Subtitle string
	// Width is the SVG width in pixels. Default WidthDefault.
	Width int
}

// WithDefaults fills zero fields with their defaults.
func (o Options) WithDefaults() Options {
	o.Title = cmp.Or(o.Title, "CPU flame graph")
	o.Width = cmp.Or(o.Width, WidthDefault)
	return o
}

// Frame is one node of the folded call tree: a function at one position
// in the stacks.
type Frame struct {
	// Name is the function name ("all" for the root).
	Name string
	// Value is the sum of the samples with this frame on the stack, in
	// the unit of the profile's sample type (nanoseconds of CPU for a CPU
	// profile).
	Value int64
	// Children are the callees, by name.
	Children []*Frame
}

// Fold merges the stacks of a profile into a call tree rooted at "all".
// It sums the sample type named "cpu" if there is one, else the last one.
// Inlined calls count as frames of their own.
func Fold(p *profile.Profile) (*Frame, error) {
	if len(p.SampleType) == 0 || len(p.Sample) == 0 {
		return nil, ErrNoSamples
	}
	vi := sampleIndex(p)
	root := &Frame{Name: "all"}
	index := map[*Frame]map[string]*Frame{}
	child := func(f *Frame, name string) *Frame {
		m := index[f]
		if m == nil {
			m = map[string]*Frame{}
			index[f] = m
		}
		c := m[name]
		if c == nil {
			c = &Frame{Name: name}
			m[name] = c
			f.Children = append(f.Children, c)
		}
		return c
	}
	for _, s := range p.Sample {
		v := s.Value[vi]
		if v <= 0 {
			continue
		}
		root.Value += v
		f := root
		// Locations go leaf first; in a location, inlined callees go first.
		for i := len(s.Location) - 1; i >= 0; i-- {
			loc := s.Location[i]
			if len(loc.Line) == 0 {
				f = child(f, fmt.Sprintf("0x%x", loc.Address))
				f.Value += v
				continue
			}
			for j := len(loc.Line) - 1; j >= 0; j-- {
				name := "?"
				if fn := loc.Line[j].Function; fn != nil {
					name = fn.Name
				}
				f = child(f, name)
				f.Value += v
			}
		}
	}
	if root.Value == 0 {
		return nil, ErrNoSamples
	}
	sortFrames(root)
	return root, nil
}

// sortFrames orders callees by name, as flame graphs do, so that the same
// call tree always draws the same.
func sortFrames(f *Frame) {
	slices.SortFunc(f.Children, func(a, b *Frame) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range f.Children {
		sortFrames(c)
	}
}

func depth(f *Frame) int {
	d := 0
	for _, c := range f.Children {
		d = max(d, depth(c))
	}
	return d + 1
}

// Render writes the flame graph of p to w.
func Render(w io.Writer, p *profile.Profile, o Options) error {
	root, err := Fold(p)
	if err != nil {
		return fmt.Errorf("flame graph: %w", err)
	}
	o = o.WithDefaults()
	if o.Subtitle == "" {
		o.Subtitle = fmt.Sprintf("%d samples", len(p.Sample))
		if p.DurationNanos > 0 {
			o.Subtitle += fmt.Sprintf(" over %.1f s", float64(p.DurationNanos)/1e9)
		}
	}
	unit := p.SampleType[sampleIndex(p)].Unit
	return write(w, root, o, unit)
}

// sampleIndex is the sample type Fold sums: "cpu" if there is one, else
// the last.
func sampleIndex(p *profile.Profile) int {
	vi := len(p.SampleType) - 1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			vi = i
		}
	}
	return vi
}

// amount renders a frame's value: CPU time for a profile in nanoseconds,
// else a count in the profile's unit.
func amount(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return fmt.Sprintf("%.0f ms", float64(v)/1e6)
	case "", "count":
		return fmt.Sprintf("%d samples", v)
	}
	return fmt.Sprintf("%d %s", v, unit)
}

const (
	pad   = 10
	top   = 56 // title and subtitle
	charW = 6.6
)

func write(w io.Writer, root *Frame, o Options, unit string) error {
	h := top + depth(root)*FrameHeightDefault + pad
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" standalone="no"?>
<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Verdana, sans-serif" font-size="11">
<rect x="0" y="0" width="%d" height="%d" fill="#fdfcf8"/>
<text x="%d" y="24" font-size="17" text-anchor="middle">%s</text>
<text x="%d" y="44" font-size="12" fill="#555" text-anchor="middle">%s</text>
`, o.Width, h, o.Width, h, o.Width, h, o.Width/2, html.EscapeString(o.Title), o.Width/2, html.EscapeString(o.Subtitle))
	scale := float64(o.Width-2*pad) / float64(root.Value)
	var draw func(f *Frame, x float64, level int)
	draw = func(f *Frame, x float64, level int) {
		wd := float64(f.Value) * scale
		if wd < MinFrameWidth {
			return
		}
		y := h - pad - (level+1)*FrameHeightDefault
		share := 100 * float64(f.Value) / float64(root.Value)
		fmt.Fprintf(&b, `<g><title>%s (%s, %.2f%%)</title><rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" rx="2"/>`,
			html.EscapeString(f.Name), amount(f.Value, unit), share, x, y, wd, FrameHeightDefault-1, color(f.Name))
		if label := fit(f.Name, wd); label != "" {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`, x+3, y+FrameHeightDefault-4, html.EscapeString(label))
		}
		b.WriteString("</g>\n")
		cx := x
		for _, c := range f.Children {
			draw(c, cx, level+1)
			cx += float64(c.Value) * scale
		}
	}
	draw(root, pad, 0)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fit shortens a label to the frame's width: the package path goes first,
// then the end is cut with "..".
func fit(name string, width float64) string {
	n := int((width - 6) / charW)
	if n < 3 {
		return ""
	}
	if len(name) <= n {
		return name
	}
	if i := strings.LastIndex(name, "/"); i >= 0 && len(name)-i-1 <= n {
		return name[i+1:]
	}
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return name[:n-2] + ".."
}

// color picks a warm color from the function name, so a function keeps
// its color across graphs; the runtime is drawn in grey-blue.
func color(name string) string {
	hs := fnv.New32a()
	_, _ = hs.Write([]byte(name))
	v := hs.Sum32()
	if strings.HasPrefix(name, "runtime.") || strings.HasPrefix(name, "internal/runtime") {
		return fmt.Sprintf("rgb(%d,%d,%d)", 150+v%40, 170+v%40, 200+v%40)
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", 205+v%50, 90+(v>>8)%130, (v>>16)%55)
}
