// Package llmtest is a fake OpenAI-compatible chat-completions server for
// tests: an httptest server that answers each call as the test's script
// says — a whole completion, a stream of chunks (slow, cut, with or
// without a usage chunk), a recorded stream replayed verbatim, or an HTTP
// error — and remembers what it was asked.
package llmtest

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Usage is the usage a reply reports.
type Usage struct {
	// Prompt and Completion are the tokens reported.
	Prompt, Completion int64
}

// Reply is how the server answers one call.
type Reply struct {
	// Status, when not 0 or 200, is answered with Body as the error text.
	Status int
	// Content is the answer: a whole completion's message, or, streamed,
	// the concatenation of Chunks when Chunks is empty.
	Content string
	// Chunks are the pieces of a streamed answer, sent Every apart after
	// FirstDelay.
	Chunks            []string
	Every, FirstDelay time.Duration
	// Usage, when set, is reported: in a whole completion, or as the
	// stream's last chunk (choices empty) before [DONE].
	Usage *Usage
	// Cut ends a stream after its chunks with no finish_reason and no
	// [DONE]; Reset also drops the connection mid-stream (no clean end).
	Cut, Reset bool
	// Raw is a recorded event stream replayed as it is, one event (lines
	// up to a blank line) every Every.
	Raw string
	// Body is an error's text, or a whole answer sent as it is (Content
	// then unused).
	Body string
}

// Call is what the server was asked.
type Call struct {
	// Stream says "stream": true; Model the model asked for.
	Stream bool
	Model  string
	// System and User are the messages.
	System, User string
	// Body is the request body, decoded.
	Body map[string]any
}

// Server is a running fake server.
type Server struct {
	// URL is its base URL (…/v1), as llm.Config.BaseURL takes it.
	URL string

	mu     sync.Mutex
	script func(Call) Reply
	calls  []Call
}

// Start starts a server answering with script; it stops with the test.
func Start(t testing.TB, script func(Call) Reply) *Server {
	s := &Server{script: script}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/v1"
	return s
}

// Script replaces the server's script.
func (s *Server) Script(script func(Call) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = script
}

// Calls returns what the server was asked, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&body) != nil {
		http.Error(w, "not a chat completion request", http.StatusNotFound)
		return
	}
	c := Call{Body: body}
	c.Stream, _ = body["stream"].(bool)
	c.Model, _ = body["model"].(string)
	if msgs, ok := body["messages"].([]any); ok {
		for _, m := range msgs {
			mm, _ := m.(map[string]any)
			text, _ := mm["content"].(string)
			switch mm["role"] {
			case "system":
				c.System = text
			case "user":
				c.User = text
			}
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	script := s.script
	s.mu.Unlock()
	rep := script(c)
	switch {
	case rep.Status != 0 && rep.Status != http.StatusOK:
		http.Error(w, rep.Body, rep.Status)
	case rep.Raw != "":
		replay(w, r, rep)
	case c.Stream:
		stream(w, r, rep)
	case rep.Body != "":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(rep.Body))
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(Completion(rep.Content, rep.Usage)))
	}
}

// Completion is a whole chat completion answering content.
func Completion(content string, u *Usage) string {
	doc := map[string]any{"id": "chatcmpl-test", "object": "chat.completion", "model": "test",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}}}
	if u != nil {
		doc["usage"] = usageDoc(u)
	}
	b, _ := json.Marshal(doc)
	return string(b)
}

func usageDoc(u *Usage) map[string]any {
	return map[string]any{"prompt_tokens": u.Prompt, "completion_tokens": u.Completion, "total_tokens": u.Prompt + u.Completion}
}

// chunk is one event of a stream, OpenAI's format.
func chunk(content string, finish any) string {
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "model": "test",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}, "finish_reason": finish}}})
	return "data: " + string(b) + "\n\n"
}

// wait sleeps d unless the client went away.
func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-r.Context().Done():
		return false
	case <-time.After(d):
		return true
	}
}

func stream(w http.ResponseWriter, r *http.Request, rep Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	send := func(s string) {
		_, _ = w.Write([]byte(s))
		if f != nil {
			f.Flush()
		}
	}
	if !wait(r, rep.FirstDelay) {
		return
	}
	chunks := rep.Chunks
	if len(chunks) == 0 {
		chunks = []string{rep.Content}
	}
	for i, c := range chunks {
		if i > 0 && !wait(r, rep.Every) {
			return
		}
		send(chunk(c, nil))
	}
	if rep.Reset {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
		return
	}
	if rep.Cut {
		return
	}
	send(chunk("", "stop"))
	if rep.Usage != nil {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": []any{}, "usage": usageDoc(rep.Usage)})
		send("data: " + string(b) + "\n\n")
	}
	send("data: [DONE]\n\n")
}

// replay sends a recorded event stream, one event every rep.Every.
func replay(w http.ResponseWriter, r *http.Request, rep Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	sc := bufio.NewScanner(strings.NewReader(rep.Raw))
	var event strings.Builder
	first := true
	flush := func() bool {
		if event.Len() == 0 {
			return true
		}
		if !first && !wait(r, rep.Every) {
			return false
		}
		first = false
		_, _ = w.Write([]byte(event.String() + "\n"))
		if f != nil {
			f.Flush()
		}
		event.Reset()
		return true
	}
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			if !flush() {
				return
			}
			continue
		}
		event.WriteString(sc.Text() + "\n")
	}
	flush()
}
