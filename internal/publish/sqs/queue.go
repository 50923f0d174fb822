package sqs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/publish/nametmpl"
)

// maxQueueLen is the longest queue name SQS accepts, ".fifo" included.
const maxQueueLen = 80

// fifoSuffix ends the name of every FIFO queue.
const fifoSuffix = ".fifo"

// errIllegalQueue is wrapped by every queue name error.
var errIllegalQueue = errors.New("sqs: illegal queue name")

func legalQueueChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// queueShape allows a '.' only in the ".fifo" suffix.
func queueShape(name string) error {
	if i := strings.IndexByte(name, '.'); i >= 0 && (name[i:] != fifoSuffix || i == 0) {
		return fmt.Errorf("%w: '.' at offset %d: only a FIFO queue's \".fifo\" suffix may hold one", errIllegalQueue, i)
	}
	return nil
}

// queueValue refuses a '.' in what a message's type or key brings into a
// queue name: it could make the name end in ".fifo", and so reach a FIFO
// queue the template did not name.
func queueValue(v string) error {
	if i := strings.IndexByte(v, '.'); i >= 0 {
		return fmt.Errorf("%w: '.' at offset %d: the \".fifo\" suffix may come only from the template", errIllegalQueue, i)
	}
	return nil
}

// queueRules are SQS's rules for queue names: 1 to 80 characters of
// [a-zA-Z0-9_-], and a FIFO queue's ".fifo" suffix, which only the
// template may bring.
var queueRules = nametmpl.Rules{
	Broker: "SQS", MaxLen: maxQueueLen, LegalChar: legalQueueChar,
	Allowed: "a-z, A-Z, 0-9, '_', '-' (and a final \".fifo\")", Illegal: errIllegalQueue,
	Extra: queueShape, Value: queueValue,
}

// parseQueue parses and checks a queue name template. Errors start with
// the field ("queue: ...").
func parseQueue(text string) (*nametmpl.Template, error) {
	return nametmpl.Parse("queue", text, queueRules)
}

// isFIFO reports whether the queue named (or addressed) by s is a FIFO
// queue.
func isFIFO(s string) bool { return strings.HasSuffix(s, fifoSuffix) }
