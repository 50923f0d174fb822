package redact

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// MinLen is the length in bytes of the shortest secret a Set redacts.
const MinLen = 4

// Set is a set of secret values to be cut out of text before it is
// written. The zero value is an empty set; a nil *Set redacts nothing.
// A Set is safe for concurrent use.
type Set struct {
	mu      sync.RWMutex
	needles []string // secrets and their escaped forms, longest first
	seen    map[string]bool
}

// NewSet returns a Set of the given secrets (see Add).
func NewSet(secrets ...string) *Set {
	s := &Set{}
	s.Add(secrets...)
	return s
}

// Add adds secrets to the set. A secret shorter than MinLen bytes is
// ignored (see the package doc). With each secret, Add also adds the forms
// in which it shows in escaped output: as a JSON string's contents (as
// zerolog and encoding/json write it), as a Go quoted string's contents
// (fmt's %q), and percent-encoded (as in a URL).
func (s *Set) Add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	for _, secret := range secrets {
		if len(secret) < MinLen {
			continue
		}
		for _, v := range forms(secret) {
			if len(v) >= MinLen && !s.seen[v] {
				s.seen[v] = true
				s.needles = append(s.needles, v)
			}
		}
	}
	sort.SliceStable(s.needles, func(i, j int) bool { return len(s.needles[i]) > len(s.needles[j]) })
}

// Len returns how many strings the set looks for (secrets and their
// escaped forms).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.needles)
}

// forms returns secret as written and escaped.
func forms(secret string) []string {
	out := []string{secret}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(secret) == nil {
		out = append(out, jsonContents(b.Bytes()))
	}
	if j, err := json.Marshal(secret); err == nil {
		out = append(out, jsonContents(j))
	}
	q := strconv.Quote(secret)
	out = append(out, q[1:len(q)-1])
	out = append(out, url.QueryEscape(secret), url.PathEscape(secret))
	return out
}

// jsonContents strips the quotes and newline around an encoded JSON string.
func jsonContents(b []byte) string {
	b = bytes.TrimSpace(b)
	return string(b[1 : len(b)-1])
}

// Redact returns text with every occurrence of every secret replaced by
// Mask. Where occurrences overlap or touch, one Mask replaces them all, so
// that no piece of either is left.
func (s *Set) Redact(text string) string {
	if s == nil {
		return text
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var spans [][2]int
	for _, n := range s.needles {
		for i := 0; i <= len(text)-len(n); {
			j := strings.Index(text[i:], n)
			if j < 0 {
				break
			}
			spans = append(spans, [2]int{i + j, i + j + len(n)})
			i += j + 1
		}
	}
	if len(spans) == 0 {
		return text
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var b strings.Builder
	b.Grow(len(text))
	pos := 0
	for k := 0; k < len(spans); {
		start, end := spans[k][0], spans[k][1]
		for k++; k < len(spans) && spans[k][0] <= end; k++ {
			end = max(end, spans[k][1])
		}
		b.WriteString(text[pos:start])
		b.WriteString(Mask)
		pos = end
	}
	b.WriteString(text[pos:])
	return b.String()
}

// Writer returns a writer that writes to w what it is given with the
// secrets of s redacted. Each Write call is redacted as a whole: a secret
// split across two calls is not found (zerolog writes one event per call,
// fmt.Fprint* one call per print). It reports len(p) written when w took
// the whole redacted text. It is safe for concurrent use when w is.
func (s *Set) Writer(w io.Writer) io.Writer { return &writer{set: s, w: w} }

type writer struct {
	set *Set
	w   io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	text := string(p)
	out := w.set.Redact(text)
	if out == text {
		return w.w.Write(p)
	}
	if _, err := io.WriteString(w.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}
