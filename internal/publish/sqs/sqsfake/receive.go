package sqsfake

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultVisibilityTimeout is a queue's visibility timeout unless a
// receive sets one.
const DefaultVisibilityTimeout = 30 * time.Second

type attrValue struct {
	DataType    string
	StringValue string
}

type received struct {
	MessageID         string `json:"MessageId"`
	ReceiptHandle     string
	MD5OfBody         string
	Body              string
	Attributes        map[string]string    `json:",omitempty"`
	MessageAttributes map[string]attrValue `json:",omitempty"`
}

func (s *Server) receiveMessage(r *http.Request, in map[string]json.RawMessage) (any, *apiError) {
	max := num(in, "MaxNumberOfMessages", 1)
	if max < 1 || max > 10 {
		return nil, senderErr("InvalidParameterValue", "InvalidParameterValue", "Value for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10.")
	}
	vis := DefaultVisibilityTimeout
	if _, ok := in["VisibilityTimeout"]; ok {
		vis = time.Duration(num(in, "VisibilityTimeout", 30)) * time.Second
	}
	wait := time.Duration(num(in, "WaitTimeSeconds", 0)) * time.Second
	var names, sysNames []string
	json.Unmarshal(in["MessageAttributeNames"], &names)
	json.Unmarshal(in["MessageSystemAttributeNames"], &sysNames)
	if len(sysNames) == 0 {
		json.Unmarshal(in["AttributeNames"], &sysNames)
	}
	deadline := time.Now().Add(wait)
	for {
		if err := r.Context().Err(); err != nil { // the connection is gone: take nothing
			return nil, &apiError{status: http.StatusServiceUnavailable, code: "ServiceUnavailable", query: "ServiceUnavailable", msg: err.Error()}
		}
		s.mu.Lock()
		q, aerr := s.queueOf(in)
		if aerr != nil {
			s.mu.Unlock()
			return nil, aerr
		}
		msgs := s.take(q, max, vis)
		s.mu.Unlock()
		if len(msgs) > 0 || time.Now().After(deadline) || r.Context().Err() != nil {
			out := make([]received, 0, len(msgs))
			for _, m := range msgs {
				sum := md5.Sum([]byte(m.Body))
				rm := received{MessageID: m.MessageID, ReceiptHandle: m.receipt, MD5OfBody: hex.EncodeToString(sum[:]), Body: m.Body}
				if len(sysNames) > 0 {
					rm.Attributes = map[string]string{
						"ApproximateReceiveCount": strconv.Itoa(m.ReceiveCount),
						"SentTimestamp":           strconv.FormatInt(m.Sent.UnixMilli(), 10),
					}
					if q.fifo {
						rm.Attributes["MessageGroupId"] = m.GroupID
						rm.Attributes["MessageDeduplicationId"] = m.DedupID
						rm.Attributes["SequenceNumber"] = strconv.FormatInt(m.Seq, 10)
					}
				}
				if len(names) > 0 && len(m.Attributes) > 0 {
					rm.MessageAttributes = map[string]attrValue{}
					for k, v := range m.Attributes {
						if wanted(names, k) {
							rm.MessageAttributes[k] = attrValue{DataType: "String", StringValue: v}
						}
					}
				}
				out = append(out, rm)
			}
			return map[string]any{"Messages": out}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wanted(names []string, k string) bool {
	for _, n := range names {
		if n == "All" || n == ".*" || n == k || strings.HasSuffix(n, ".*") && strings.HasPrefix(k, strings.TrimSuffix(n, "*")) {
			return true
		}
	}
	return false
}

// take hands out up to max visible messages, in order; of a FIFO queue
// none of a group with a message in flight. s.mu is held.
func (s *Server) take(q *queue, max int, vis time.Duration) []*Message {
	now := time.Now()
	inflight := map[string]bool{}
	if q.fifo {
		for _, m := range q.msgs {
			if !m.deleted && m.invisibleTo.After(now) {
				inflight[m.GroupID] = true
			}
		}
	}
	var out []*Message
	taken := map[string]bool{}
	for _, m := range q.msgs {
		if len(out) == max {
			break
		}
		if m.deleted {
			continue
		}
		if m.invisibleTo.After(now) {
			continue
		}
		if q.fifo && inflight[m.GroupID] && !taken[m.GroupID] {
			continue
		}
		m.ReceiveCount++
		m.invisibleTo = now.Add(vis)
		m.receipt = fmt.Sprintf("%s#%d", m.MessageID, m.ReceiveCount)
		taken[m.GroupID] = true
		inflight[m.GroupID] = true
		out = append(out, m)
	}
	return out
}

// byReceipt finds the message a receipt handle was given for, the latest
// one only. s.mu is held.
func (s *Server) byReceipt(in map[string]json.RawMessage) (*Message, *apiError) {
	q, aerr := s.queueOf(in)
	if aerr != nil {
		return nil, aerr
	}
	h := str(in, "ReceiptHandle")
	for _, m := range q.msgs {
		if m.receipt == h && h != "" {
			return m, nil
		}
	}
	return nil, senderErr("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "The input receipt handle is invalid.")
}

func (s *Server) deleteMessage(in map[string]json.RawMessage) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, aerr := s.byReceipt(in)
	if aerr != nil {
		return nil, aerr
	}
	m.deleted = true
	return struct{}{}, nil
}

func (s *Server) changeVisibility(in map[string]json.RawMessage) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, aerr := s.byReceipt(in)
	if aerr != nil {
		return nil, aerr
	}
	if m.deleted || !m.invisibleTo.After(time.Now()) {
		return nil, senderErr("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "The message referred to is not in flight.")
	}
	m.invisibleTo = time.Now().Add(time.Duration(num(in, "VisibilityTimeout", 0)) * time.Second)
	return struct{}{}, nil
}
