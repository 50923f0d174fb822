package sinktest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"

	"github.com/walpost/walpost/internal/message"
)

// Reporter is the part of testing.TB the checks use.
type Reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// maxReports bounds how many problems of one kind a check reports.
const maxReports = 10

// Diff describes how got differs from want in the fields the destination
// carries according to f, or returns "" when they match.
func Diff(f Features, want, got *message.Message) string {
	var d []string
	if got.ID != want.ID {
		d = append(d, fmt.Sprintf("id %q, want %q", got.ID, want.ID))
	}
	if got.Type != want.Type {
		d = append(d, fmt.Sprintf("type %q, want %q", got.Type, want.Type))
	}
	if f.NullKey {
		if got.HasKey != want.HasKey || got.Key != want.Key {
			d = append(d, fmt.Sprintf("key %s, want %s", showKey(got), showKey(want)))
		}
	} else if got.OrderingKey() != want.OrderingKey() {
		d = append(d, fmt.Sprintf("ordering key %q, want %q", got.OrderingKey(), want.OrderingKey()))
	}
	if !samePayload(f, want, got) {
		d = append(d, fmt.Sprintf("payload %s, want %s", showBytes(got.Payload), showBytes(want.Payload)))
	}
	if !sameHeaders(want.Headers, got.Headers) {
		d = append(d, fmt.Sprintf("headers %v, want %v", got.Headers, want.Headers))
	}
	if f.LSN && (got.LSN != want.LSN || got.CommitLSN != want.CommitLSN) {
		d = append(d, fmt.Sprintf("lsn %s commit_lsn %s, want %s and %s", got.LSN, got.CommitLSN, want.LSN, want.CommitLSN))
	}
	if p := f.CommitTime; p > 0 && !got.CommitTime.Truncate(p).Equal(want.CommitTime.Truncate(p)) {
		d = append(d, fmt.Sprintf("commit time %s, want %s (precision %s)", got.CommitTime, want.CommitTime, p))
	}
	return strings.Join(d, "; ")
}

func showKey(m *message.Message) string {
	if !m.HasKey {
		return "NULL"
	}
	return fmt.Sprintf("%q", m.Key)
}

func showBytes(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%q… (%d bytes)", b[:80], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func samePayload(f Features, want, got *message.Message) bool {
	if bytes.Equal(want.Payload, got.Payload) {
		return true
	}
	if !f.ReencodesJSON || !want.PayloadJSON {
		return false
	}
	var a, b any
	da := json.NewDecoder(bytes.NewReader(want.Payload))
	da.UseNumber()
	db := json.NewDecoder(bytes.NewReader(got.Payload))
	db.UseNumber()
	if da.Decode(&a) != nil || db.Decode(&b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// sameHeaders treats a nil map and an empty one as equal: not every
// destination tells them apart.
func sameHeaders(a, b map[string]string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return maps.Equal(a, b)
}

// CheckDelivered reports, through r, every way in which got (what the
// destination holds, in destination order) fails to be a delivery of want
// (what was published, in publish order):
//
//   - a message of want is missing, or got holds an id that was never
//     published;
//   - a message differs from what was published (Diff);
//   - an id appears more than once although dupOK does not list it (only
//     a batch that was retried may be duplicated);
//   - per ordering key, the order of first appearances differs from the
//     publish order; and with f.GlobalOrder, the order of first
//     appearances over all keys differs from it.
//
// It returns true when it reported nothing.
func CheckDelivered(r Reporter, f Features, want, got []*message.Message, dupOK map[string]bool) bool {
	r.Helper()
	ok := true
	byID := make(map[string]*message.Message, len(want))
	for _, m := range want {
		byID[m.ID] = m
	}
	seen := make(map[string]int, len(got))
	var first []*message.Message // first appearances, in destination order
	diffs, strangers, dups := 0, 0, 0
	for i, g := range got {
		w, known := byID[g.ID]
		if !known {
			if strangers++; strangers <= maxReports {
				r.Errorf("destination holds message %q (position %d) that was never published", g.ID, i)
			}
			ok = false
			continue
		}
		seen[g.ID]++
		if seen[g.ID] > 1 {
			if !dupOK[g.ID] {
				if dups++; dups <= maxReports {
					r.Errorf("message %s (lsn %s) delivered %d times, but it was not in a retried batch", g.ID, w.LSN, seen[g.ID])
				}
				ok = false
			}
			continue
		}
		first = append(first, g)
		if d := Diff(f, w, g); d != "" {
			if diffs++; diffs <= maxReports {
				r.Errorf("message %s (lsn %s) came back changed: %s", g.ID, w.LSN, d)
			}
			ok = false
		}
	}
	var missing []string
	for _, w := range want {
		if seen[w.ID] == 0 {
			missing = append(missing, fmt.Sprintf("%s (lsn %s, key %q)", w.ID, w.LSN, w.OrderingKey()))
		}
	}
	if len(missing) > 0 {
		ok = false
		r.Errorf("%d of %d published messages missing at the destination, first: %s",
			len(missing), len(want), strings.Join(missing[:min(len(missing), maxReports)], ", "))
	}
	for _, n := range []int{diffs, strangers, dups} {
		if n > maxReports {
			r.Errorf("(%d more problems of that kind not shown)", n-maxReports)
		}
	}
	if !checkOrder(r, f, want, first) {
		ok = false
	}
	return ok
}

// checkOrder compares the first appearances per ordering key (and in total,
// for GlobalOrder) against the publish order. Missing and unknown ids were
// reported already and are left out of the comparison.
func checkOrder(r Reporter, f Features, want, first []*message.Message) bool {
	r.Helper()
	present := make(map[string]bool, len(first))
	for _, g := range first {
		present[g.ID] = true
	}
	wantPerKey := map[string][]*message.Message{}
	var wantAll []*message.Message
	for _, w := range want {
		if present[w.ID] {
			wantPerKey[w.OrderingKey()] = append(wantPerKey[w.OrderingKey()], w)
			wantAll = append(wantAll, w)
		}
	}
	gotPerKey := map[string][]*message.Message{}
	// Group by the published message's key: the destination's own view of
	// the key was compared by Diff.
	byID := make(map[string]*message.Message, len(want))
	for _, w := range want {
		byID[w.ID] = w
	}
	for _, g := range first {
		k := byID[g.ID].OrderingKey()
		gotPerKey[k] = append(gotPerKey[k], g)
	}
	ok := true
	reports := 0
	for k, ws := range wantPerKey {
		gs := gotPerKey[k]
		for i := range ws {
			if gs[i].ID != ws[i].ID {
				ok = false
				if reports++; reports <= maxReports {
					r.Errorf("key %q out of order: position %d holds %s (lsn %s), want %s (lsn %s)",
						k, i, gs[i].ID, byID[gs[i].ID].LSN, ws[i].ID, ws[i].LSN)
				}
				break
			}
		}
	}
	if f.GlobalOrder {
		for i := range wantAll {
			if first[i].ID != wantAll[i].ID {
				ok = false
				r.Errorf("total order broken: position %d holds %s (lsn %s), want %s (lsn %s)",
					i, first[i].ID, byID[first[i].ID].LSN, wantAll[i].ID, wantAll[i].LSN)
				break
			}
		}
	}
	return ok
}
