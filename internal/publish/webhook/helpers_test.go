package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// request is one request a receiver got, in full.
type request struct {
	header http.Header
	body   []byte
}

// receiver is an HTTP endpoint that records every request it read in
// full, in arrival order, and answers with answer (200 when nil).
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	reqs     []request
	answer   func(w http.ResponseWriter, r request) bool // true: answered
	inFlight int
	maxIn    int // most requests handled at once
}

func newReceiver(t testing.TB) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(rc)
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-body
	}
	req := request{header: r.Header.Clone(), body: body}
	rc.mu.Lock()
	rc.inFlight++
	rc.maxIn = max(rc.maxIn, rc.inFlight)
	answer := rc.answer
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.inFlight--
		rc.mu.Unlock()
	}()
	if answer != nil && answer(w, req) {
		return
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, req)
	rc.mu.Unlock()
	io.WriteString(w, "ok\n")
}

// setAnswer replaces how the receiver answers.
func (rc *receiver) setAnswer(f func(w http.ResponseWriter, r request) bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answer = f
}

// requests returns the requests recorded (answered 200) so far.
func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.reqs...)
}

// newSink opens a webhook sink on url with the extra settings given as
// YAML "key: value" lines.
func newSink(t testing.TB, url string, extra ...string) *Sink {
	t.Helper()
	return newSinkLog(t, zerolog.Nop(), url, extra...)
}

func newSinkLog(t testing.TB, log zerolog.Logger, url string, extra ...string) *Sink {
	t.Helper()
	doc := "name: hook\nkind: webhook\nurl: " + url + "\n" + strings.Join(extra, "\n")
	s, err := New(sinktest.SinkConfig(t, doc), log)
	if err != nil {
		t.Fatalf("New: %v\n%s", err, doc)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}

// notColumn are the request headers that do not come from the outbox
// headers column.
var notColumn = map[string]bool{"User-Agent": true, "Accept-Encoding": true, "X-Static": true}

// columnHeaders returns the headers of a request that came from the
// headers column, names lower-cased (HTTP header names are
// case-insensitive; the tests' names are lower-case).
func columnHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, vs := range h {
		if isReserved(k) || notColumn[k] {
			continue
		}
		out[strings.ToLower(k)] = vs[0]
	}
	return out
}

// rawMessage reads a request of mode message, format raw, back into the
// message it carries.
func rawMessage(r request) *message.Message {
	m := &message.Message{
		ID:          r.header.Get(headerID),
		Type:        r.header.Get(headerType),
		Payload:     r.body,
		PayloadJSON: r.header.Get("Content-Type") == "application/json",
		Headers:     columnHeaders(r.header),
	}
	if v, ok := r.header[headerKey]; ok {
		m.Key, m.HasKey = v[0], true
	}
	return m
}

// batchMessages reads a request of mode batch back into its messages.
func batchMessages(t testing.TB, r request) []*message.Message {
	t.Helper()
	var lines []sinktest.Line
	if err := json.Unmarshal(r.body, &lines); err != nil {
		t.Fatalf("batch body is not a JSON array of the file sink's objects: %v: %.200s", err, r.body)
	}
	var msgs []*message.Message
	for _, l := range lines {
		m, err := l.Message()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// requirePartial fails unless err reports exactly the first k of n
// messages durable (none: no Partial at all).
func requirePartial(t *testing.T, err error, n, k int) {
	t.Helper()
	done, ok := publish.DoneOf(err)
	if k == 0 {
		if ok {
			t.Fatalf("error reports %v durable, want none: %v", done, err)
		}
		return
	}
	if !ok || len(done) != n {
		t.Fatalf("error reports %v durable (ok %v), want the first %d of %d: %v", done, ok, k, n, err)
	}
	for i, d := range done {
		if d != (i < k) {
			t.Fatalf("error reports %v durable, want the first %d of %d", done, k, n)
		}
	}
}

// bodyHas reports whether a request's body contains s.
func bodyHas(r request, s string) bool { return bytes.Contains(r.body, []byte(s)) }
