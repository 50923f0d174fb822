// Package snsfake is an in-process stand-in for Amazon SNS's publishing
// side that speaks its wire protocol (the AWS query protocol, form
// requests and XML answers, as the Go SDK v2 sends them), for the sns
// sink's tests and the cdc binary's. goaws (v0.4.5) answers the query
// protocol but has no PublishBatch and no FIFO topics.
//
// It keeps standard and FIFO topics (a name ending in ".fifo"),
// PublishBatch with per-entry results, the 10-entry and 256 KiB limits,
// the 10-attribute limit, MessageGroupId required on FIFO topics and
// MessageDeduplicationId deduplicated over 5 minutes (a duplicate is
// acknowledged, not stored). It stores what is published per topic, in
// order, for the tests to read; there are no subscriptions, no fan-out,
// no signature checks, IAM or KMS. Faults: Throttle, FailEntries, Stop
// and Start on the same port with the topics kept.
//
// A Server is safe for concurrent use.
package snsfake

import (
	"encoding/xml"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DedupWindow is how long a FIFO topic remembers a deduplication id.
const DedupWindow = 5 * time.Minute

// MaxMessageSize is SNS's limit of a message and of a batch.
const MaxMessageSize = 256 << 10

// Message is a message as the stand-in holds it.
type Message struct {
	MessageID  string
	Body       string
	Attributes map[string]string
	GroupID    string
	DedupID    string
}

type topic struct {
	fifo  bool
	msgs  []Message
	dedup map[string]time.Time
	order []string
}

// Server is the stand-in; use Start or New and Listen.
type Server struct {
	mu       sync.Mutex
	topics   map[string]*topic // by name
	seq      int64
	throttle int
	fail     func(topic, body string) (code string, senderFault bool)
	requests map[string]int

	addr string
	srv  *http.Server
}

// New returns a stand-in that does not listen yet.
func New() *Server { return &Server{topics: map[string]*topic{}, requests: map[string]int{}} }

// Start returns a stand-in on a free loopback port, closed when the test
// ends.
func Start(t interface {
	Helper()
	Fatal(...any)
	Cleanup(func())
}) *Server {
	t.Helper()
	s := New()
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Listen starts serving on addr, which Stop and Start keep.
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.addr = ln.Addr().String()
	s.mu.Unlock()
	s.serve(ln)
	return nil
}

func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go srv.Serve(ln)
}

// URL is the endpoint to give the SDK.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "http://" + s.addr
}

// Stop closes the listener and every connection; the topics are kept.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Start listens again on the port of the first Listen.
func (s *Server) Start() error {
	s.mu.Lock()
	addr := s.addr
	s.mu.Unlock()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	s.serve(ln)
	return nil
}

// ARN returns the ARN of topic name.
func ARN(name string) string { return "arn:aws:sns:us-east-1:000000000000:" + name }

// CreateTopic creates topic name (FIFO when it ends in ".fifo") and
// returns its ARN.
func (s *Server) CreateTopic(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topics[name] == nil {
		s.topics[name] = &topic{fifo: strings.HasSuffix(name, ".fifo"), dedup: map[string]time.Time{}}
	}
	return ARN(name)
}

// Messages returns what topic name stored, in order.
func (s *Server) Messages(name string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.topics[name]; t != nil {
		return append([]Message(nil), t.msgs...)
	}
	return nil
}

// Count returns how many messages topic name stored.
func (s *Server) Count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.topics[name]; t != nil {
		return len(t.msgs)
	}
	return 0
}

// Throttle answers the next n requests with Throttled (HTTP 400).
func (s *Server) Throttle(n int) {
	s.mu.Lock()
	s.throttle = n
	s.mu.Unlock()
}

// FailEntries fails every entry for which f returns a code.
func (s *Server) FailEntries(f func(topic, body string) (code string, senderFault bool)) {
	s.mu.Lock()
	s.fail = f
	s.mu.Unlock()
}

// Requests returns how many requests of action op were answered.
func (s *Server) Requests(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[op]
}

type xmlError struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	xml.NewEncoder(w).Encode(xmlError{Type: "Sender", Code: code, Message: msg, RequestID: "snsfake"})
}

var (
	entryRE = regexp.MustCompile(`^PublishBatchRequestEntries\.member\.(\d+)\.(.+)$`)
	attrRE  = regexp.MustCompile(`^MessageAttributes\.entry\.(\d+)\.(Name|Value\.DataType|Value\.StringValue)$`)
)

type entry struct {
	id, body, group, dedup string
	attrs                  map[int]*[2]string // index → name, value
	size                   int
}

type resultEntry struct {
	ID             string `xml:"Id"`
	MessageID      string `xml:"MessageId"`
	SequenceNumber string `xml:"SequenceNumber,omitempty"`
}

type failedEntry struct {
	ID          string `xml:"Id"`
	Code        string `xml:"Code"`
	Message     string `xml:"Message"`
	SenderFault bool   `xml:"SenderFault"`
}

type publishBatchResponse struct {
	XMLName    xml.Name      `xml:"PublishBatchResponse"`
	Xmlns      string        `xml:"xmlns,attr"`
	Successful []resultEntry `xml:"PublishBatchResult>Successful>member"`
	Failed     []failedEntry `xml:"PublishBatchResult>Failed>member"`
	RequestID  string        `xml:"ResponseMetadata>RequestId"`
}

// ServeHTTP answers one query-protocol request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeErr(w, http.StatusBadRequest, "InvalidParameter", err.Error())
		return
	}
	op := r.PostForm.Get("Action")
	s.mu.Lock()
	s.requests[op]++
	if s.throttle > 0 {
		s.throttle--
		s.mu.Unlock()
		writeErr(w, http.StatusBadRequest, "Throttled", "Rate exceeded")
		return
	}
	s.mu.Unlock()
	if op != "PublishBatch" {
		writeErr(w, http.StatusBadRequest, "InvalidAction", "the stand-in implements PublishBatch only")
		return
	}
	arn := r.PostForm.Get("TopicArn")
	name := arn[strings.LastIndexByte(arn, ':')+1:]
	entries := parseEntries(r.PostForm)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[name]
	switch {
	case t == nil:
		writeErr(w, http.StatusNotFound, "NotFound", "Topic does not exist")
		return
	case len(entries) == 0:
		writeErr(w, http.StatusBadRequest, "EmptyBatchRequest", "The batch request doesn't contain any entries.")
		return
	case len(entries) > 10:
		writeErr(w, http.StatusBadRequest, "TooManyEntriesInBatchRequest", "The batch request contains more entries than permissible.")
		return
	}
	keys := make([]int, 0, len(entries))
	total := 0
	for n, e := range entries {
		keys = append(keys, n)
		e.size = len(e.body)
		for _, a := range e.attrs {
			e.size += len(a[0]) + len("String") + len(a[1])
		}
		total += e.size
	}
	if total > MaxMessageSize {
		writeErr(w, http.StatusBadRequest, "BatchRequestTooLong", "The length of all the messages put together is more than the limit.")
		return
	}
	sort.Ints(keys)
	out := publishBatchResponse{Xmlns: "http://sns.amazonaws.com/doc/2010-03-31/", RequestID: "snsfake"}
	now := time.Now()
	for _, n := range keys {
		s.publishEntry(t, name, entries[n], now, &out)
	}
	w.Header().Set("Content-Type", "text/xml")
	xml.NewEncoder(w).Encode(out)
}

// parseEntries gathers the PublishBatchRequestEntries.member.N.* fields of
// a PublishBatch request by N.
func parseEntries(form url.Values) map[int]*entry {
	entries := map[int]*entry{}
	for k, vs := range form {
		m := entryRE.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		e := entries[n]
		if e == nil {
			e = &entry{attrs: map[int]*[2]string{}}
			entries[n] = e
		}
		switch f := m[2]; f {
		case "Id":
			e.id = vs[0]
		case "Message":
			e.body = vs[0]
		case "MessageGroupId":
			e.group = vs[0]
		case "MessageDeduplicationId":
			e.dedup = vs[0]
		default:
			if am := attrRE.FindStringSubmatch(f); am != nil {
				i, _ := strconv.Atoi(am[1])
				a := e.attrs[i]
				if a == nil {
					a = &[2]string{}
					e.attrs[i] = a
				}
				switch am[2] {
				case "Name":
					a[0] = vs[0]
				case "Value.StringValue":
					a[1] = vs[0]
				}
			}
		}
	}
	return entries
}

// publishEntry publishes e to topic t (named name), or records why not, in
// out. s.mu is held.
func (s *Server) publishEntry(t *topic, name string, e *entry, now time.Time, out *publishBatchResponse) {
	bad := func(code, msg string, sender bool) {
		out.Failed = append(out.Failed, failedEntry{ID: e.id, Code: code, Message: msg, SenderFault: sender})
	}
	if s.fail != nil {
		if code, sender := s.fail(name, e.body); code != "" {
			bad(code, "failed by the test", sender)
			return
		}
	}
	switch {
	case e.body == "":
		bad("InvalidParameter", "Empty message", true)
		return
	case len(e.attrs) > 10:
		bad("InvalidParameter", "Number of message attributes exceeds the allowed maximum [10].", true)
		return
	case t.fifo && e.group == "":
		bad("InvalidParameter", "The MessageGroupId parameter is required for FIFO topics", true)
		return
	case t.fifo && e.dedup == "":
		bad("InvalidParameter", "The topic should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly", true)
		return
	}
	if t.fifo {
		for len(t.order) > 0 && now.Sub(t.dedup[t.order[0]]) > DedupWindow {
			delete(t.dedup, t.order[0])
			t.order = t.order[1:]
		}
		if _, dup := t.dedup[e.dedup]; dup {
			out.Successful = append(out.Successful, resultEntry{ID: e.id, MessageID: "dup-" + e.dedup, SequenceNumber: "0"})
			return
		}
		t.dedup[e.dedup] = now
		t.order = append(t.order, e.dedup)
	}
	s.seq++
	m := Message{MessageID: fmt.Sprintf("00000000-0000-4000-9000-%012d", s.seq), Body: e.body, GroupID: e.group, DedupID: e.dedup, Attributes: map[string]string{}}
	for _, a := range e.attrs {
		m.Attributes[a[0]] = a[1]
	}
	t.msgs = append(t.msgs, m)
	res := resultEntry{ID: e.id, MessageID: m.MessageID}
	if t.fifo {
		res.SequenceNumber = strconv.FormatInt(s.seq, 10)
	}
	out.Successful = append(out.Successful, res)
}
