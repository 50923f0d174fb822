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
// and Start on the same port with the topics kept. The listener, the
// faults and the deduplication window are awsfake's, shared with
// sqsfake.
//
// A Server is safe for concurrent use.
package snsfake

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/walpost/walpost/internal/publish/awsbatch/awsfake"
)

// DedupWindow is how long a FIFO topic remembers a deduplication id.
const DedupWindow = awsfake.DedupWindow

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
	dedup awsfake.Dedup
}

// Server is the stand-in; use Start or New and Listen.
//
// Its Listener's methods serve it (URL, Stop and Start on the same port
// with the topics kept, Close, Outage); its Faults' inject faults
// (Throttle: Throttled answers, FailEntries, Requests).
type Server struct {
	awsfake.Listener
	awsfake.Faults

	mu     sync.Mutex
	topics map[string]*topic // by name
	seq    int64
}

// New returns a stand-in that does not listen yet.
func New() *Server { return &Server{topics: map[string]*topic{}} }

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
	t.Cleanup(s.Close)
	return s
}

// Listen starts serving on addr, which Stop and Start keep.
func (s *Server) Listen(addr string) error { return s.Listener.Listen(addr, s) }

// ARN returns the ARN of topic name.
func ARN(name string) string { return "arn:aws:sns:us-east-1:000000000000:" + name }

// CreateTopic creates topic name (FIFO when it ends in ".fifo") and
// returns its ARN.
func (s *Server) CreateTopic(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topics[name] == nil {
		s.topics[name] = &topic{fifo: strings.HasSuffix(name, ".fifo")}
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
	if s.Request(op) {
		writeErr(w, http.StatusBadRequest, "Throttled", "Rate exceeded")
		return
	}
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
	if code, sender := s.Fail(name, e.body); code != "" {
		bad(code, "failed by the test", sender)
		return
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
		if msgID, dup := t.dedup.Seen(e.dedup, now); dup {
			out.Successful = append(out.Successful, resultEntry{ID: e.id, MessageID: msgID, SequenceNumber: "0"})
			return
		}
	}
	s.seq++
	m := Message{MessageID: fmt.Sprintf("00000000-0000-4000-9000-%012d", s.seq), Body: e.body, GroupID: e.group, DedupID: e.dedup, Attributes: map[string]string{}}
	if t.fifo {
		t.dedup.Remember(e.dedup, m.MessageID, now)
	}
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
