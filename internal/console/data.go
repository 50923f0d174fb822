package console

import (
	"bytes"
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

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/store"
)

// SourceView is a source as /api/v1/sources shows it: the slot (as cdc
// status --json names its fields), where a fleet runs it, each sink's
// progress and rate, the held keys and how many messages are parked.
type SourceView struct {
	Name string `json:"name"`
	Slot string `json:"slot"`
	// State is the source's state in this instance's fleet (streaming,
	// standby, ...: docs/fleet.md); "" outside a fleet.
	State string `json:"state,omitempty"`
	// Error is why its status could not be read; the other fields are
	// then empty.
	Error         string        `json:"error,omitempty"`
	Exists        bool          `json:"exists"`
	Active        bool          `json:"active"`
	ActivePID     *int32        `json:"active_pid"`
	ConfirmedLSN  string        `json:"confirmed_lsn,omitempty"`
	CurrentWAL    string        `json:"current_wal,omitempty"`
	LagBytes      int64         `json:"lag_bytes"`
	LagSeconds    float64       `json:"lag_seconds"` // walpost_slot_stalled_seconds
	OldestSeconds float64       `json:"oldest_inflight_seconds"`
	RetainedBytes int64         `json:"retained_bytes"`
	WALStatus     string        `json:"wal_status,omitempty"`
	Sinks         []SinkView    `json:"sinks"`
	HeldKeys      []HeldKeyView `json:"held_keys"`
	// Parked counts the rows of the dead-letter table, resent ones
	// included (cdc status --json: dead_letters.total).
	Parked   int      `json:"parked"`
	Warnings []string `json:"warnings"`
	// History is the lag over the last hour, oldest first.
	History []Sample `json:"history"`
}

// SinkView is one sink's progress: the commit it acknowledged (cdc
// status), what this process published to it and how fast.
type SinkView struct {
	Name                  string  `json:"name"`
	AcknowledgedCommitLSN *string `json:"acknowledged_commit_lsn"`
	// AcknowledgedCommitTime is when that commit was made.
	AcknowledgedCommitTime *time.Time `json:"acknowledged_commit_time"`
	Published              float64    `json:"published"`
	// RatePerSecond is over the last sample interval; null before two
	// samples.
	RatePerSecond *float64 `json:"rate_per_second"`
	Failing       bool     `json:"failing"`
}

// HeldKeyView is a held key: its head, the message it waits behind, with
// the row.
type HeldKeyView struct {
	Sink     string       `json:"sink"` // "" held for every sink
	Key      string       `json:"key"`
	Messages int          `json:"messages"`
	Head     *MessageView `json:"head"`
}

// MessageView is a parked row as the console shows it (as cdc
// dead-letter list --json, plus ref).
type MessageView struct {
	// Ref names the row in actions: "SINK|POSITION", SINK "-" for a row
	// parked for every sink.
	Ref        string          `json:"ref"`
	ID         *string         `json:"id"`
	At         string          `json:"at"`
	CommitLSN  string          `json:"commit_lsn"`
	Sink       string          `json:"sink"`
	ParkedAt   time.Time       `json:"parked_at"`
	ResentAt   *time.Time      `json:"resent_at"`
	Error      string          `json:"error"`
	RowData    json.RawMessage `json:"row_data"`
	HoldKey    *string         `json:"hold_key"`
	HeldBehind *string         `json:"held_behind"`
}

// Group is the parked messages not resent of one failure: one sink and
// one error fingerprint (the error with its numbers, quoted values and
// ids taken out).
type Group struct {
	ID          string        `json:"id"`
	Sink        string        `json:"sink"`
	Fingerprint string        `json:"fingerprint"`
	Count       int           `json:"count"`
	Messages    []MessageView `json:"messages"`
}

// Detail is /api/v1/sources/NAME: the source and its parked messages by
// failure.
type Detail struct {
	SourceView
	Groups []Group `json:"groups"`
	// Unsent counts the parked messages not resent: those in Groups.
	Unsent int `json:"unsent"`
	// Truncated: more parked messages than maxShown; the groups hold the
	// first ones (cdc dead-letter list has them all).
	Truncated bool `json:"truncated"`
}

// maxShown is the most parked messages a view lists.
const maxShown = 500

// refOf is p's Ref.
func refOf(p *store.Parked) string {
	sink := p.Sink
	if sink == "" {
		sink = "-"
	}
	return sink + "|" + p.At()
}

func (c *Console) messageView(p *store.Parked) MessageView {
	m := MessageView{Ref: refOf(p), At: p.At(), CommitLSN: p.CommitLSN.String(), Sink: p.Sink, ParkedAt: p.ParkedAt.UTC(),
		Error: c.redact(p.Error), RowData: p.RowData}
	if p.ID != "" {
		m.ID = &p.ID
	}
	if !p.ResentAt.IsZero() {
		r := p.ResentAt.UTC()
		m.ResentAt = &r
	}
	if p.HoldKey != "" {
		m.HoldKey = &p.HoldKey
	}
	if p.HeldBehind != "" {
		m.HeldBehind = &p.HeldBehind
	}
	return m
}

// view reads src's status as cdc status does (admin.ReadStatus).
func (c *Console) view(ctx context.Context, src *source) SourceView {
	v := SourceView{Name: src.name, Slot: src.cfg.Postgres.Slot, Sinks: []SinkView{}, HeldKeys: []HeldKeyView{}, Warnings: []string{},
		History: src.hist.list()}
	if c.fleet != nil {
		for _, s := range c.fleet().Sources {
			if s.Name == src.name {
				v.State = s.State
			}
		}
	}
	met := c.metrics(src)
	v.LagSeconds, v.OldestSeconds = met.stalled, met.inflight
	rate := rates(v.History)
	for _, s := range src.cfg.Sinks {
		sv := SinkView{Name: s.Name, Published: met.published[s.Name], Failing: met.failing[s.Name]}
		if r, ok := rate[s.Name]; ok {
			sv.RatePerSecond = &r
		}
		v.Sinks = append(v.Sinks, sv)
	}
	st, err := admin.ReadStatus(ctx, src.cfg)
	if err != nil {
		v.Error = c.redact(err.Error())
		return v
	}
	info := st.Slot
	v.Exists, v.Active, v.CurrentWAL = info.Exists, info.Active, info.CurrentWAL.String()
	for _, w := range append(append(slices.Clone(st.Warnings), st.Coverage...), st.Cautions...) {
		v.Warnings = append(v.Warnings, c.redact(w))
	}
	if info.Exists {
		v.ConfirmedLSN, v.LagBytes, v.RetainedBytes, v.WALStatus = info.ConfirmedFlush.String(), info.LagBytes, info.RetainedBytes, info.WALStatus
		if info.Active {
			v.ActivePID = &info.ActivePID
		}
	} else {
		v.Warnings = append(v.Warnings, "slot "+src.cfg.Postgres.Slot+" is missing: run cdc init")
	}
	for i := range v.Sinks {
		sv := &v.Sinks[i]
		if p, ok := st.Progress[sv.Name]; ok {
			lsn := p.CommitLSN.String()
			sv.AcknowledgedCommitLSN = &lsn
			if !p.CommitTime.IsZero() {
				t := p.CommitTime.UTC()
				sv.AcknowledgedCommitTime = &t
			}
		}
	}
	for _, n := range st.Parked {
		v.Parked += n
	}
	for _, h := range st.Held {
		v.HeldKeys = append(v.HeldKeys, HeldKeyView{Sink: h.Sink, Key: h.Key, Messages: h.Messages})
	}
	return v
}

// detail is view plus the parked messages not resent, by failure, and
// each held key's head with its row.
func (c *Console) detail(ctx context.Context, src *source) Detail {
	d := Detail{SourceView: c.view(ctx, src), Groups: []Group{}}
	if d.Error != "" || !d.Exists {
		return d
	}
	dl, err := replay.OpenDeadLetters(ctx, src.cfg)
	if err != nil {
		d.Error = c.redact(err.Error())
		return d
	}
	defer dl.Close()
	parked, _, err := dl.List(ctx, store.ParkedFilter{Unsent: true})
	if err != nil {
		d.Error = c.redact(err.Error())
		return d
	}
	for i := range d.HeldKeys {
		h := &d.HeldKeys[i]
		if head := headOf(parked, h.Sink, h.Key); head != nil {
			m := c.messageView(head)
			h.Head = &m
		}
	}
	d.Unsent = len(parked)
	if len(parked) > maxShown {
		parked, d.Truncated = parked[:maxShown], true
	}
	d.Groups = c.groups(parked)
	return d
}

// headOf returns the first, in stream order, of parked's rows of the
// held key (sink, key) not resent: the one the key waits behind.
func headOf(parked []store.Parked, sink, key string) *store.Parked {
	var head *store.Parked
	for i := range parked {
		p := &parked[i]
		if !p.Held() || p.Sink != sink || p.HoldKey != key {
			continue
		}
		if head == nil || cmp.Or(cmp.Compare(p.CommitLSN, head.CommitLSN), cmp.Compare(p.LSN, head.LSN), cmp.Compare(p.Seq, head.Seq)) < 0 {
			head = p
		}
	}
	return head
}

// groups sorts parked into failure groups, the largest first.
func (c *Console) groups(parked []store.Parked) []Group {
	by := map[string]*Group{}
	for i := range parked {
		p := &parked[i]
		fp := Fingerprint(p.Error)
		if p.HeldBehind != "" {
			fp = "held behind the first parked message of its key"
		}
		id := groupID(p.Sink, fp)
		g := by[id]
		if g == nil {
			g = &Group{ID: id, Sink: p.Sink, Fingerprint: c.redact(fp)}
			by[id] = g
		}
		g.Count++
		g.Messages = append(g.Messages, c.messageView(p))
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

// prettyJSON indents raw for the page; raw as it is when it is not JSON.
func prettyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}
