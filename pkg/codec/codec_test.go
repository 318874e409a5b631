package codec_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	fast "github.com/segmentio/encoding/json"

	"github.com/narratoria/runtime/internal/planfsm"
	. "github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// samples are values of every message type the hot path codes, as our
// components write them, edge cases included.
func samples() []any {
	at := time.Date(2026, 11, 24, 15, 4, 5, 123456789, time.UTC)
	details := map[string]any{"stderrTail": "line\n<b>&", "z": 1.5, "a": []any{"x", nil, true}}
	return []any{
		&messages.ToolJob{PlanID: "0b3a5c9e-1111-2222-3333-444455556666", SessionID: "s-1", ToolID: "t1", Skill: "dice-roller", Script: "roll-dice",
			Attempt: 2, Input: json.RawMessage(`{"formula": "1d20+2", "why":"<attack> & \u2028"}`), State: json.RawMessage(`{"hp":10}`), TimeoutMs: 30000, DispatchedAt: at},
		&messages.Outcome{PlanID: "p", SessionID: "s", ToolID: "t", Skill: "k", Script: "r", Attempt: 1, State: messages.ToolSuccess,
			Output: json.RawMessage(`{"total": 17, "rolls": [17]}`), Done: &messages.DoneEvent{OK: true, Summary: "é ünïcode ✓", Output: json.RawMessage(`{"total":17}`)},
			Events: []json.RawMessage{json.RawMessage(`{"version":"0","type":"log","level":"info","message":"a\tb"}`)}, StartedAt: at, ExecutionTimeMs: 3, Worker: "w", Deliveries: 1},
		&messages.Outcome{PlanID: "p", State: messages.ToolFailed, Error: &messages.ToolError{Code: "timeout", Category: messages.CategoryTimeout, Message: "ran past 30s", Details: details},
			ExitCode: -1, EventsRef: &messages.EventsRef{Stream: "NARRATORIA_EVENTS", Subject: "narratoria.events.s.p.t", FirstSeq: 9, Count: 700}},
		&messages.Progress{PlanID: "p", ToolID: "t", State: "running", Attempt: 1, At: at, Error: "x\"y"},
		&planfsm.Tool{State: messages.ToolRunning, Attempt: 3, DispatchedAt: at, InputKey: "abc", Output: json.RawMessage(`[1, 2]`)},
		&planfsm.Record{Plan: json.RawMessage(`{"requestId":"p","tools":[]}`), SessionID: "s", AcceptedAt: at, Deadline: at.Add(time.Minute), Root: "p"},
	}
}

// eventHeader is the shape of pkg/messages' event header.
type eventHeader struct {
	Version *string `json:"version"`
	Type    *string `json:"type"`
}

// fresh returns a new zero value of v's type.
func fresh(v any) any { return reflect.New(reflect.TypeOf(v).Elem()).Interface() }

// agree checks the codec against encoding/json on one input for one type.
func agree(t *testing.T, typ any, data []byte) {
	t.Helper()
	if !Fast(typ) {
		// Coded by encoding/json itself.
		c, b := fresh(typ), fresh(typ)
		err, errStd := Unmarshal(data, c), json.Unmarshal(data, b)
		if (err == nil) != (errStd == nil) || !reflect.DeepEqual(c, b) {
			t.Fatalf("%T %q: codec %v, encoding/json %v", typ, data, err, errStd)
		}
		return
	}
	a, b := fresh(typ), fresh(typ)
	errFast, errStd := fast.Unmarshal(data, a), json.Unmarshal(data, b)
	if errFast != nil {
		// The codec falls back to encoding/json: same result whatever it is.
		c := fresh(typ)
		if err := Unmarshal(data, c); (err == nil) != (errStd == nil) || err != nil && err.Error() != errStd.Error() {
			t.Fatalf("%T %q: codec error %v, encoding/json %v", typ, data, err, errStd)
		}
		if errStd == nil && !reflect.DeepEqual(c, b) {
			t.Fatalf("%T %q: after the fallback, decoded\n%#v\nwant\n%#v", typ, data, c, b)
		}
		return
	}
	if errStd != nil {
		t.Fatalf("%T %q: the fast decoder accepts what encoding/json refuses: %v", typ, data, errStd)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%T %q: decoded\n%#v\nwant\n%#v", typ, data, a, b)
	}
	encFast, err1 := Marshal(a)
	encStd, err2 := json.Marshal(b)
	if (err1 == nil) != (err2 == nil) || !sameJSON(encFast, encStd) {
		t.Fatalf("%T: encoded\n%s (%v)\nwant\n%s (%v)", typ, encFast, err1, encStd, err2)
	}
}

// sameJSON says whether two encodings are the same JSON value: they may
// differ only in how a character is escaped ("\b" or "\u0008").
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func TestCodecAgreesOnSamples(t *testing.T) {
	for _, v := range samples() {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Marshal(v)
		if err != nil || !sameJSON(got, want) {
			t.Fatalf("%T: encoded\n%s\nwant\n%s", v, got, want)
		}
		agree(t, v, want)
	}
}

// FuzzCodecAgrees: on any input, for every message type, the codec
// decodes what encoding/json decodes (and nothing it refuses), and
// encodes the result to the same bytes.
func FuzzCodecAgrees(f *testing.F) {
	for _, v := range samples() {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	for _, s := range []string{`{"version":"0","type":"done","ok":true,"output":{"x":[1,2]}}`, `{"version":"0","type":"log","level":"info","message":"a\u00e9"}`,
		`{"version":"0","type":"state_patch","patch":{"a":{"b":null}}}`, `{"version":"0","type":"ui_event","event":"narrative_choice","payload":{"options":["a"]}}`,
		`{"version":0,"type":"done","ok":"yes"}`, `{"planId":"P","PLANID":"q","attempt":1e2}`, `{"attempt":1.5}`, `{"attempt":99999999999999999999}`,
		`{"planId":"\ud800x"}`, "{\"planId\":\"\xff\"}", `{"output":{"a":1,}}`, `{"events":[1,"x",{}]}`, `{"startedAt":"yesterday"}`,
		`{"error":{"details":{"k":[1,{"x":null}]}}}`, `null`, `[]`, ` {"planId" : "x" } `, `{"planId":"a","planId":"b"}`} {
		f.Add([]byte(s))
	}
	types := []any{&messages.ToolJob{}, &messages.Outcome{}, &messages.Progress{}, &planfsm.Tool{}, &planfsm.Record{},
		// what DecodeEvent reads a protocol line into
		&eventHeader{}, &map[string]json.RawMessage{}, &messages.LogEvent{}, &messages.StatePatchEvent{}, &messages.AssetEvent{},
		&messages.UIEvent{}, &messages.ErrorEvent{}, &messages.DoneEvent{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range types {
			agree(t, typ, data)
		}
	})
}

func TestFastSkipsOmitZero(t *testing.T) {
	if Fast(&planfsm.Tool{}) || Fast(&planfsm.Record{}) {
		t.Fatal("records with omitzero fields must be coded by encoding/json")
	}
	for _, v := range []any{&messages.ToolJob{}, &messages.Outcome{}, &messages.Progress{}, &messages.DoneEvent{}} {
		if !Fast(v) {
			t.Fatalf("%T should be coded fast", v)
		}
	}
}

func BenchmarkCodec(b *testing.B) {
	for _, v := range samples()[:2] {
		raw, _ := json.Marshal(v)
		b.Run(reflect.TypeOf(v).Elem().Name()+"/std", func(b *testing.B) {
			for b.Loop() {
				out, _ := json.Marshal(v)
				_ = json.Unmarshal(raw, fresh(v))
				_ = out
			}
		})
		b.Run(reflect.TypeOf(v).Elem().Name()+"/codec", func(b *testing.B) {
			for b.Loop() {
				out, _ := Marshal(v)
				_ = Unmarshal(raw, fresh(v))
				_ = out
			}
		})
	}
}
