package ops

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/store"
)

// Message is the parked view of one row of the dead-letter table: cdc
// dead-letter list --json and show --json print an array of them, the
// console shows them (docs/operations.md, "Replay and parked messages").
type Message struct {
	// Ref names the row in the console's actions: "SINK|AT", SINK "-"
	// for a row parked for every sink.
	Ref string `json:"ref"`
	// ID is the message id; null when the row's id could not be read.
	ID *string `json:"id"`
	// At is the row's position as commands take it: LSN, then ":" and
	// Seq when that is not 0.
	At        string     `json:"at"`
	LSN       string     `json:"lsn"`
	Seq       uint32     `json:"seq"`
	CommitLSN string     `json:"commit_lsn"`
	Sink      string     `json:"sink"` // "" parked for every sink
	ParkedAt  time.Time  `json:"parked_at"`
	ResentAt  *time.Time `json:"resent_at"`
	Error     string     `json:"error"`
	// RowData is the message as the file sink writes it (refused or
	// held), or the mapped columns of a row that could not be mapped.
	RowData json.RawMessage `json:"row_data"`
	// HoldKey and HeldBehind: relay.on_invalid or on_refused: hold_key.
	HoldKey    *string `json:"hold_key"`
	HeldBehind *string `json:"held_behind"`

	p           store.Parked
	slot, table string
}

// Filter selects parked rows of the slot.
type Filter struct {
	// IDs selects rows by message id or position (0/16B3748 for every
	// row at it, 0/16B3748:2 for one), as cdc dead-letter takes them.
	IDs []string
	// Refs selects rows by Message.Ref, as the console names them.
	Refs []string
	// Sink, when set, selects the messages that sink refused.
	Sink string
	// Unsent leaves out the rows resent already.
	Unsent bool
}

// Parked returns the rows f selects, in stream order (then sink), after
// the Room's checks (ready). When some of f.IDs or f.Refs select nothing,
// the rows found come with a NotFoundError naming those.
func (r *Room) Parked(ctx context.Context, f Filter) ([]Message, error) {
	rows, err := r.parked(ctx, f)
	var out []Message
	for i := range rows {
		out = append(out, r.message(&rows[i]))
	}
	return out, err
}

// parked is Parked's rows.
func (r *Room) parked(ctx context.Context, f Filter) ([]store.Parked, error) {
	if err := r.ready(ctx); err != nil {
		return nil, err
	}
	sf := store.ParkedFilter{IDs: f.IDs, Sink: f.Sink, Unsent: f.Unsent}
	for _, ref := range f.Refs {
		_, at, _ := strings.Cut(ref, "|")
		sf.IDs = append(sf.IDs, at)
	}
	if len(f.Refs) > 0 && len(sf.IDs) == 0 {
		return nil, r.notFound(f.Refs)
	}
	rows, err := store.ListParked(ctx, r.conns.State, r.t, sf)
	if err != nil {
		return nil, err
	}
	if len(f.Refs) > 0 {
		want := map[string]bool{}
		for _, ref := range f.Refs {
			want[ref] = true
		}
		rows = slices.DeleteFunc(rows, func(p store.Parked) bool { return !want[refOf(&p)] })
	}
	if missing := unmatched(f, rows); len(missing) > 0 {
		return rows, r.notFound(missing)
	}
	return rows, nil
}

// unmatched returns the names of f that select none of rows.
func unmatched(f Filter, rows []store.Parked) []string {
	var out []string
	for _, id := range f.IDs {
		lsn, seq, isAt := store.ParseAt(strings.ToUpper(id))
		if !slices.ContainsFunc(rows, func(p store.Parked) bool {
			return p.ID == id || isAt && p.LSN == lsn && (seq < 0 || int64(p.Seq) == seq)
		}) {
			out = append(out, id)
		}
	}
	for _, ref := range f.Refs {
		if !slices.ContainsFunc(rows, func(p store.Parked) bool { return refOf(&p) == ref }) {
			out = append(out, ref)
		}
	}
	return out
}

// refOf is p's Message.Ref.
func refOf(p *store.Parked) string { return SinkLabel(p.Sink) + "|" + p.At() }

// SinkLabel is how the views name a row's sink: "-" for every sink.
func SinkLabel(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// message is p as the view shows it.
func (r *Room) message(p *store.Parked) Message {
	m := Message{Ref: refOf(p), At: p.At(), LSN: p.LSN.String(), Seq: p.Seq, CommitLSN: p.CommitLSN.String(), Sink: p.Sink, ParkedAt: p.ParkedAt.UTC(),
		Error: r.redact(p.Error), RowData: p.RowData, p: *p, slot: r.t.Slot, table: r.cfg.Postgres.DeadLetterTable}
	if p.ID != "" {
		m.ID = ptr(p.ID)
	}
	if !p.ResentAt.IsZero() {
		m.ResentAt = ptr(p.ResentAt.UTC())
	}
	if p.HoldKey != "" {
		m.HoldKey = ptr(p.HoldKey)
	}
	if p.HeldBehind != "" {
		m.HeldBehind = ptr(p.HeldBehind)
	}
	return m
}

// Name is how commands name the row: its id, or its position.
func (m *Message) Name() string { return m.p.Name() }

// Held reports whether the row belongs to a held key and is not resent.
func (m *Message) Held() bool { return m.p.Held() }

// Group is the parked messages of one failure: one sink and one error
// fingerprint (the error with its numbers, quoted values and ids taken
// out).
type Group struct {
	ID          string    `json:"id"`
	Sink        string    `json:"sink"`
	Fingerprint string    `json:"fingerprint"`
	Count       int       `json:"count"`
	Messages    []Message `json:"messages"`
}

// ParkedGroups is the parked messages not resent, by failure: the
// console's view of a source's dead letters (/api/v1/sources/NAME).
type ParkedGroups struct {
	Groups []Group `json:"groups"`
	// Unsent counts the parked messages not resent: those in Groups.
	Unsent int `json:"unsent"`
	// Truncated: more than the max asked; cdc dead-letter list has them
	// all.
	Truncated bool `json:"truncated"`
}

// ParkedGroups reads the parked messages not resent, the first max of
// them in Groups.
func (r *Room) ParkedGroups(ctx context.Context, max int) (ParkedGroups, error) {
	u := ParkedGroups{Groups: []Group{}}
	msgs, err := r.Parked(ctx, Filter{Unsent: true})
	if err != nil {
		return u, err
	}
	u.Unsent = len(msgs)
	if len(msgs) > max {
		msgs, u.Truncated = msgs[:max], true
	}
	u.Groups = Groups(msgs)
	return u, nil
}

// Groups sorts msgs into failure groups, the largest first.
func Groups(msgs []Message) []Group {
	by := map[string]*Group{}
	for _, m := range msgs {
		fp := Fingerprint(m.Error)
		if m.HeldBehind != nil {
			fp = "held behind the first parked message of its key"
		}
		id := groupID(m.Sink, fp)
		g := by[id]
		if g == nil {
			g = &Group{ID: id, Sink: m.Sink, Fingerprint: fp}
			by[id] = g
		}
		g.Count++
		g.Messages = append(g.Messages, m)
	}
	out := []Group{}
	for _, id := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[id])
	}
	slices.SortStableFunc(out, func(a, b Group) int { return cmp.Compare(b.Count, a.Count) })
	return out
}

// groupID names the group of (sink, fingerprint).
func groupID(sink, fp string) string {
	h := sha256.Sum256([]byte(sink + "\x00" + fp))
	return hex.EncodeToString(h[:6])
}

var (
	quoted    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	uuidLike  = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	lsnLike   = regexp.MustCompile(`(?i)\b[0-9a-f]{1,8}/[0-9a-f]{1,8}(:\d+)?\b`)
	hexLike   = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b|\b[0-9a-f]{16,}\b`)
	numberRun = regexp.MustCompile(`\d+`)
)

// Fingerprint is err's first line with what differs between messages of
// one failure (quoted values, ids, positions, numbers) replaced, so that
// one cause gives one fingerprint.
func Fingerprint(err string) string {
	s, _, _ := strings.Cut(err, "\n")
	s = quoted.ReplaceAllString(s, "…")
	s = uuidLike.ReplaceAllString(s, "ID")
	s = lsnLike.ReplaceAllString(s, "LSN")
	s = hexLike.ReplaceAllString(s, "X")
	s = numberRun.ReplaceAllString(s, "N")
	return strings.TrimSpace(s)
}
