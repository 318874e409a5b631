package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"
)

// maxEventLine bounds one line of the event stream.
const maxEventLine = 1 << 20

// Stream sends req with "stream": true and calls onText with each piece of
// the answer as the server sends it (server-sent events, OpenAI's chunk
// format; the final usage chunk is asked for with stream_options). It
// returns the whole answer. With no first words within the
// configuration's FirstTokenTimeout, or past ctx's deadline, it fails as
// a timeout; a stream that ends before the answer does (no [DONE], no
// finish_reason) fails as cut. The answer so far comes with the error.
// A server that answers a whole completion instead is read as one piece.
func (c *Client) Stream(ctx context.Context, req Request, onText func(string)) (*Answer, error) {
	t0 := time.Now()
	a, err := c.stream(ctx, req, onText, t0)
	if a != nil && a.Content == "" && err != nil {
		a = nil // nothing came: nothing spent that we know of
	}
	return c.account(req, a, err, t0)
}

func (c *Client) stream(ctx context.Context, req Request, onText func(string), t0 time.Time) (*Answer, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var starved atomic.Bool
	first := time.AfterFunc(c.cfg.FirstTokenTimeout, func() { starved.Store(true); cancel() })
	defer first.Stop()
	resp, err := c.post(ctx, req, true)
	if err != nil {
		return nil, starvedError(err, starved.Load(), c.cfg.FirstTokenTimeout)
	}
	defer resp.Body.Close()
	r := &sseReader{br: bufio.NewReaderSize(resp.Body, 64<<10), a: &Answer{}}
	r.onText = func(s string) {
		if r.a.FirstToken == 0 {
			first.Stop()
			r.a.FirstToken = time.Since(t0)
		}
		onText(s)
	}
	err = r.read()
	if err != nil && !errors.As(err, new(*Error)) {
		err = transportError(ctx, err)
	}
	return r.a, starvedError(err, starved.Load(), c.cfg.FirstTokenTimeout)
}

// starvedError names the first-token timeout as the cause of a timeout.
func starvedError(err error, starved bool, d time.Duration) error {
	if err == nil || !starved {
		return err
	}
	return &Error{Kind: KindTimeout, Err: fmt.Errorf("no first words within %s: %w", d, err)}
}

// sseReader reads a chat completion's event stream into an Answer.
type sseReader struct {
	br     *bufio.Reader
	a      *Answer
	onText func(string)
	// done: [DONE] came, or a finish_reason.
	done bool
}

// streamChunk is one event of a streamed chat completion.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		// Message is a whole answer's, from a server that ignored "stream".
		Message      *chatMessage `json:"message"`
		FinishReason *string      `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// read reads events until [DONE] or the end of the body.
func (r *sseReader) read() error {
	var content strings.Builder
	defer func() { r.a.Content = content.String() }()
	for {
		line, err := r.line()
		if len(line) > 0 {
			if perr := r.event(line, &content); perr != nil {
				return perr
			}
		}
		if r.done && r.a.Usage != (Usage{}) {
			return nil
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if r.done {
				return nil
			}
			return &Error{Kind: KindCut, Err: fmt.Errorf("the stream ended after %d characters, before the answer did", content.Len())}
		}
		if err != nil {
			if r.done {
				return nil // the answer ended; the server did not close
			}
			return err
		}
	}
}

// line returns the next line without its end; io.EOF with the last one.
func (r *sseReader) line() ([]byte, error) {
	var out []byte
	for {
		part, isPrefix, err := r.br.ReadLine()
		out = append(out, part...)
		if len(out) > maxEventLine {
			return nil, &Error{Kind: KindJSON, Err: fmt.Errorf("an event line over %d bytes", maxEventLine)}
		}
		if err != nil || !isPrefix {
			return bytes.TrimSpace(out), err
		}
	}
}

// event takes one line of the stream: a data line of a chunk, [DONE], a
// whole completion (a server that does not stream), or anything else
// (comments, event names), ignored.
func (r *sseReader) event(line []byte, content *strings.Builder) error {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		if line[0] != '{' {
			return nil
		}
		data = line // not an event stream: a JSON answer
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		r.done = true
		return nil
	}
	var ch streamChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return &Error{Kind: KindJSON, Err: fmt.Errorf("not a chunk of a chat completion: %s", clip(string(data), 200))}
	}
	if ch.Error != nil {
		return &Error{Kind: KindServer, Err: fmt.Errorf("error event: %s", clip(ch.Error.Message, 200))}
	}
	if ch.Usage != nil {
		r.a.Usage = Usage{Prompt: ch.Usage.PromptTokens, Completion: ch.Usage.CompletionTokens}
	}
	for _, c := range ch.Choices {
		text := c.Delta.Content
		if c.Message != nil {
			text = c.Message.Content
		}
		if text != "" {
			content.WriteString(text)
			r.onText(text)
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			r.done, r.a.Finish = true, *c.FinishReason
		}
	}
	if !ok && r.a.Finish == "" {
		r.done = true // a whole answer ends where it ends
	}
	return nil
}
