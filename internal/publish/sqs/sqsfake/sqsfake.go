// Package sqsfake is an in-process stand-in for Amazon SQS that speaks
// its current wire protocol (AWS JSON 1.0 over HTTP, as the Go SDK v2
// sends it), for the sqs sink's tests, the inboxsqs loop's and the cdc
// binary's. No emulator in the registries does: goaws (v0.4.5) answers
// only the older query protocol, which the SDK no longer speaks.
//
// It keeps what the sink's and the receivers' guarantees rest on:
// standard and FIFO queues (a name ending in ".fifo"); SendMessage and
// SendMessageBatch with per-entry results, the 10-entry and size limits
// (MaximumMessageSize, 256 KiB unless set; a batch's total too), the
// 10-attribute limit and the character rules of bodies and attribute
// values; on FIFO queues MessageGroupId required, and
// MessageDeduplicationId deduplicated over 5 minutes (a duplicate is
// acknowledged, not stored); ReceiveMessage with visibility timeouts,
// long polling and, on FIFO queues, one group's messages in order with
// none of a group handed out while one of it is in flight;
// DeleteMessage, ChangeMessageVisibility; GetQueueUrl and CreateQueue;
// message timers: an entry's DelaySeconds (0 to 900) keeps the message
// from every receive until then, and a FIFO queue refuses one, as SQS
// does. Signatures are not checked, and there is no IAM, KMS, dead-letter
// redrive, or queue-wide delay.
//
// Faults for tests: Throttle answers the next requests with
// RequestThrottled; FailEntries fails chosen entries of batches; Stop and
// Start take the listener down and up on the same port, the queues kept
// (a restarted SQS keeps what it acknowledged).
//
// The listener, the faults and the deduplication window are awsfake's,
// shared with snsfake. A Server is safe for concurrent use.
package sqsfake

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/publish/awsbatch/awsfake"
)

// DedupWindow is how long a FIFO queue remembers a deduplication id.
const DedupWindow = awsfake.DedupWindow

// MaxDelaySeconds is the largest DelaySeconds SQS takes (15 minutes).
const MaxDelaySeconds = 900

// DefaultMaxMessageSize is a queue's MaximumMessageSize unless set.
const DefaultMaxMessageSize = 256 << 10

// Message is a message as the stand-in holds it.
type Message struct {
	MessageID    string
	Body         string
	Attributes   map[string]string // message attributes: name → string value
	GroupID      string
	DedupID      string
	Seq          int64
	ReceiveCount int
	Sent         time.Time
	// DelaySeconds is the send's DelaySeconds: no receive gets the
	// message before Sent plus that many seconds.
	DelaySeconds int

	receipt     string
	invisibleTo time.Time
	deleted     bool
}

type queue struct {
	name    string
	fifo    bool
	maxSize int
	msgs    []*Message
	dedup   awsfake.Dedup
}

// Server is the stand-in. The zero value is not usable; use New or Start.
//
// Its Listener's methods serve it: URL, Stop (as a server that died
// would: the listener and every connection closed, the queues kept),
// Start (again on the same port), Close and Outage. Its Faults' methods
// inject faults: Throttle (RequestThrottled answers), FailEntries (the
// queue's name and an entry's body in, a code out), Requests.
type Server struct {
	awsfake.Listener
	awsfake.Faults

	mu     sync.Mutex
	cond   *sync.Cond // signalled when a message is stored or released
	queues map[string]*queue
	seq    int64
}

// New returns a stand-in that does not listen yet (see Start).
func New() *Server {
	s := &Server{queues: map[string]*queue{}}
	s.cond = sync.NewCond(&s.mu)
	s.OnStop = func() { // wake the long polls, whose connections are gone
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	}
	return s
}

// Listen starts serving on addr ("127.0.0.1:0" picks a port), which Stop
// and Start keep.
func (s *Server) Listen(addr string) error { return s.Listener.Listen(addr, s) }

// QueueOptions are a queue's attributes.
type QueueOptions struct {
	// MaxMessageSize is MaximumMessageSize; 0 means 256 KiB.
	MaxMessageSize int
}

// CreateQueue creates queue name (FIFO when it ends in ".fifo") unless it
// exists, and returns its URL.
func (s *Server) CreateQueue(name string, opts QueueOptions) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.createLocked(name, opts)
	return s.queueURL(name)
}

func (s *Server) createLocked(name string, opts QueueOptions) *queue {
	if q, ok := s.queues[name]; ok {
		return q
	}
	if opts.MaxMessageSize == 0 {
		opts.MaxMessageSize = DefaultMaxMessageSize
	}
	q := &queue{name: name, fifo: strings.HasSuffix(name, ".fifo"), maxSize: opts.MaxMessageSize}
	s.queues[name] = q
	return q
}

func (s *Server) queueURL(name string) string { return s.URL() + "/000000000000/" + name }

// Messages returns the messages queue holds (not deleted), in the order
// stored, as copies.
func (s *Server) Messages(name string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return nil
	}
	var out []Message
	for _, m := range q.msgs {
		if !m.deleted {
			c := *m
			out = append(out, c)
		}
	}
	return out
}

// apiError is an error answer.
type apiError struct {
	status int
	code   string // the JSON __type's shape name
	query  string // the x-amzn-query-error code
	msg    string
}

func senderErr(code, query, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, query: query, msg: msg}
}

// ServeHTTP answers one request of the AWS JSON 1.0 protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, "AmazonSQS.")
	if r.Method != http.MethodPost || !ok {
		writeErr(w, senderErr("InvalidAction", "AWS.SimpleQueueService.InvalidAction", "not an AWS JSON 1.0 SQS request"))
		return
	}
	var in map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeErr(w, senderErr("InvalidParameterValue", "InvalidParameterValue", "body is not JSON: "+err.Error()))
		return
	}
	if s.Request(op) {
		writeErr(w, senderErr("RequestThrottled", "RequestThrottled", "Rate exceeded"))
		return
	}
	var out any
	var aerr *apiError
	switch op {
	case "CreateQueue":
		out, aerr = s.createQueue(in)
	case "GetQueueUrl":
		out, aerr = s.getQueueURL(in)
	case "SendMessage":
		out, aerr = s.sendMessage(in)
	case "SendMessageBatch":
		out, aerr = s.sendMessageBatch(in)
	case "ReceiveMessage":
		out, aerr = s.receiveMessage(r, in)
	case "DeleteMessage":
		out, aerr = s.deleteMessage(in)
	case "ChangeMessageVisibility":
		out, aerr = s.changeVisibility(in)
	default:
		aerr = senderErr("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "the stand-in does not implement "+op)
	}
	if aerr != nil {
		writeErr(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	json.NewEncoder(w).Encode(out)
}

func writeErr(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", e.query+";Sender")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.msg})
}

func str(in map[string]json.RawMessage, k string) string {
	var v string
	json.Unmarshal(in[k], &v)
	return v
}

func num(in map[string]json.RawMessage, k string, def int) int {
	raw, ok := in[k]
	if !ok {
		return def
	}
	var v int
	if json.Unmarshal(raw, &v) != nil {
		return def
	}
	return v
}

// queueOf finds the queue of a request's QueueUrl (its last path segment).
func (s *Server) queueOf(in map[string]json.RawMessage) (*queue, *apiError) {
	u := str(in, "QueueUrl")
	name := u[strings.LastIndexByte(u, '/')+1:]
	q := s.queues[name]
	if q == nil {
		return nil, senderErr("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
	}
	return q, nil
}

func (s *Server) createQueue(in map[string]json.RawMessage) (any, *apiError) {
	var attrs map[string]string
	json.Unmarshal(in["Attributes"], &attrs)
	opts := QueueOptions{}
	if v := attrs["MaximumMessageSize"]; v != "" {
		opts.MaxMessageSize, _ = strconv.Atoi(v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := str(in, "QueueName")
	s.createLocked(name, opts)
	return map[string]string{"QueueUrl": s.queueURL(name)}, nil
}

func (s *Server) getQueueURL(in map[string]json.RawMessage) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := str(in, "QueueName")
	if s.queues[name] == nil {
		return nil, senderErr("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
	}
	return map[string]string{"QueueUrl": s.queueURL(name)}, nil
}

// sendEntry is an entry of SendMessageBatch, or SendMessage's input.
type sendEntry struct {
	ID                     string `json:"Id"`
	MessageBody            string
	MessageGroupID         string `json:"MessageGroupId"`
	MessageDeduplicationID string `json:"MessageDeduplicationId"`
	DelaySeconds           *int
	MessageAttributes      map[string]struct {
		DataType    string
		StringValue string
	}
}

func (e *sendEntry) size() int {
	n := len(e.MessageBody)
	for k, v := range e.MessageAttributes {
		n += len(k) + len(v.DataType) + len(v.StringValue)
	}
	return n
}

type sendResult struct {
	ID               string `json:"Id,omitempty"`
	MessageID        string `json:"MessageId"`
	MD5OfMessageBody string
	SequenceNumber   string `json:",omitempty"`
}

type failedEntry struct {
	ID          string `json:"Id"`
	Code        string
	Message     string
	SenderFault bool
}

func (s *Server) sendMessage(in map[string]json.RawMessage) (any, *apiError) {
	var e sendEntry
	raw, _ := json.Marshal(in)
	json.Unmarshal(raw, &e)
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(in)
	if aerr != nil {
		return nil, aerr
	}
	if e.size() > q.maxSize {
		return nil, senderErr("InvalidParameterValue", "InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be shorter than "+strconv.Itoa(q.maxSize)+" bytes.")
	}
	res, f := s.store(q, &e)
	if f != nil {
		return nil, senderErr(f.Code, f.Code, f.Message)
	}
	return res, nil
}

func (s *Server) sendMessageBatch(in map[string]json.RawMessage) (any, *apiError) {
	var entries []sendEntry
	json.Unmarshal(in["Entries"], &entries)
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(in)
	if aerr != nil {
		return nil, aerr
	}
	switch {
	case len(entries) == 0:
		return nil, senderErr("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", "There should be at least one SendMessageBatchRequestEntry in the request.")
	case len(entries) > 10:
		return nil, senderErr("TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "Maximum number of entries per request are 10.")
	}
	ids, total := map[string]bool{}, 0
	for i := range entries {
		if ids[entries[i].ID] {
			return nil, senderErr("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id "+entries[i].ID+" repeated.")
		}
		ids[entries[i].ID] = true
		total += entries[i].size()
	}
	if total > q.maxSize {
		return nil, senderErr("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong",
			fmt.Sprintf("Batch requests cannot be longer than %d bytes. You have sent %d bytes.", q.maxSize, total))
	}
	out := struct {
		Successful []sendResult
		Failed     []failedEntry
	}{Successful: []sendResult{}, Failed: []failedEntry{}}
	for i := range entries {
		res, f := s.store(q, &entries[i])
		if f != nil {
			f.ID = entries[i].ID
			out.Failed = append(out.Failed, *f)
			continue
		}
		res.ID = entries[i].ID
		out.Successful = append(out.Successful, res)
	}
	return out, nil
}

// store checks and stores one message; s.mu is held.
func (s *Server) store(q *queue, e *sendEntry) (sendResult, *failedEntry) {
	bad := func(code, msg string) (sendResult, *failedEntry) {
		return sendResult{}, &failedEntry{Code: code, Message: msg, SenderFault: true}
	}
	if code, sender := s.Fail(q.name, e.MessageBody); code != "" {
		return sendResult{}, &failedEntry{Code: code, Message: "failed by the test", SenderFault: sender}
	}
	switch {
	case e.MessageBody == "":
		return bad("InvalidParameterValue", "The request must contain the parameter MessageBody.")
	case !validChars(e.MessageBody):
		return bad("InvalidMessageContents", "Invalid binary character in the message body.")
	case len(e.MessageAttributes) > 10:
		return bad("InvalidParameterValue", fmt.Sprintf("Number of message attributes [%d] exceeds the allowed maximum [10].", len(e.MessageAttributes)))
	case q.fifo && e.MessageGroupID == "":
		return bad("MissingParameter", "The request must contain the parameter MessageGroupId.")
	case q.fifo && e.MessageDeduplicationID == "":
		return bad("InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	case !q.fifo && e.MessageDeduplicationID != "":
		return bad("InvalidParameterValue", "The request include parameter that is not valid for this queue type")
	case e.DelaySeconds != nil && (*e.DelaySeconds < 0 || *e.DelaySeconds > MaxDelaySeconds):
		return bad("InvalidParameterValue", fmt.Sprintf("Value %d for parameter DelaySeconds is invalid. Reason: must be between 0 and %d, if provided.", *e.DelaySeconds, MaxDelaySeconds))
	case q.fifo && e.DelaySeconds != nil && *e.DelaySeconds != 0:
		// SQS: a FIFO queue takes a delay per queue only.
		return bad("InvalidParameterValue", fmt.Sprintf("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", *e.DelaySeconds))
	}
	for k, v := range e.MessageAttributes {
		switch {
		case k == "" || len(k) > 256 || strings.HasPrefix(strings.ToLower(k), "aws.") || strings.HasPrefix(strings.ToLower(k), "amazon."):
			return bad("InvalidAttributeName", "Message attribute name '"+k+"' is invalid.")
		case v.StringValue == "" || !validChars(v.StringValue):
			return bad("InvalidAttributeValue", "Message attribute '"+k+"' must contain a non-empty, valid value.")
		}
	}
	sum := md5.Sum([]byte(e.MessageBody))
	res := sendResult{MD5OfMessageBody: hex.EncodeToString(sum[:])}
	now := time.Now()
	if q.fifo {
		if msgID, dup := q.dedup.Seen(e.MessageDeduplicationID, now); dup {
			res.MessageID = msgID
			res.SequenceNumber = "0"
			return res, nil
		}
	}
	s.seq++
	m := &Message{
		MessageID: fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq),
		Body:      e.MessageBody, GroupID: e.MessageGroupID, DedupID: e.MessageDeduplicationID,
		Seq: s.seq, Sent: now, Attributes: map[string]string{},
	}
	for k, v := range e.MessageAttributes {
		m.Attributes[k] = v.StringValue
	}
	if e.DelaySeconds != nil && *e.DelaySeconds > 0 {
		// Delayed: invisible until then, as SQS holds it; a receive
		// skips it (take), and it was never in flight.
		m.DelaySeconds = *e.DelaySeconds
		m.invisibleTo = now.Add(time.Duration(*e.DelaySeconds) * time.Second)
	}
	q.msgs = append(q.msgs, m)
	if q.fifo {
		q.dedup.Remember(e.MessageDeduplicationID, m.MessageID, now)
		res.SequenceNumber = strconv.FormatInt(s.seq, 10)
	}
	res.MessageID = m.MessageID
	s.cond.Broadcast()
	return res, nil
}

// validChars reports whether SQS takes v: #x9 | #xA | #xD | #x20 to
// #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.
func validChars(v string) bool {
	if !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return false
		}
	}
	return true
}

// Start returns a stand-in listening on a free loopback port, closed when
// the test ends.
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

// Count returns how many messages queue holds (not deleted), without
// copying them.
func (s *Server) Count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return 0
	}
	n := 0
	for _, m := range q.msgs {
		if !m.deleted {
			n++
		}
	}
	return n
}
