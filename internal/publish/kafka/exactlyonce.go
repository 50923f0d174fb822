package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// exactly_once (docs/sinks/kafka.md, "Exactly once"): after Resume, each
// Publish call is one Kafka transaction holding the call's records and,
// last, a progress record: the position of the call's last message,
// keyed by slot and sink, on the compacted progress topic. The
// transactional id is derived from the slot and the sink's name, so that
// a second instance on the same configuration (a standby taking over, a
// fleet member, a stray process) fences the first when it resumes: the
// first's next commit fails with PRODUCER_FENCED, a Permanent error.
// Receivers reading with isolation.level=read_committed see a batch
// whole or not at all, and the relay resumes the sink from the committed
// progress (publish.Resumer), so no batch is written twice.

var _ publish.Resumer = (*Sink)(nil)

// txnState is a sink's transactional producer after Resume.
type txnState struct {
	slot   string
	id     string // the transactional id
	key    []byte // the progress record's key
	walEnd pglogrepl.LSN
	client *kgo.Client
	// pids are the producer ids this process's producers got for id, and
	// epoch the current producer's epoch (restartTxn): a progress record
	// is this sink's only when one of them wrote it, in a transaction.
	pids  map[int64]bool
	epoch int16
	// committed is the position of the last message the sink knows
	// Kafka holds from it (valid when hasCommitted): read at Resume, then
	// raised by each commit. Publish never commits a message at or before
	// it (the replay guard; docs/sinks/kafka.md, "Exactly once").
	committed    publish.Position
	hasCommitted bool
	// replaying counts the messages the guard dropped since the replay
	// began (noteReplay); 0 when no replay is under way.
	replaying int
	// broken: the last transaction's outcome is not known (an error after
	// BeginTransaction). The next Publish starts a new producer, which
	// aborts whatever is still open, and reads the committed progress
	// to leave out what the last transaction did commit.
	broken bool
}

// raise moves committed up to pos, never back.
func (t *txnState) raise(pos publish.Position) {
	if !t.covers(&message.Message{CommitLSN: pos.CommitLSN, LSN: pos.LSN, Seq: pos.Seq}) {
		t.committed, t.hasCommitted = pos, true
	}
}

// covers reports whether m is at or before committed.
func (t *txnState) covers(m *message.Message) bool { return t.hasCommitted && t.committed.Covers(m) }

// progressValue is the progress record's value (JSON).
type progressValue struct {
	Slot      string `json:"slot"`
	Sink      string `json:"sink"`
	CommitLSN string `json:"commit_lsn"`
	LSN       string `json:"lsn"`
	Seq       uint32 `json:"seq"`
}

// TransactionalID returns the transactional id of the sink name on slot
// with exactly_once.
func TransactionalID(slot, sink string) string { return "walpost." + slot + "." + sink }

// Resume implements publish.Resumer. Without exactly_once it does nothing
// (not Found). With it, it makes sure the progress topic exists (creating
// it compacted, one partition, when missing), starts the transactional
// producer (which fences any other producer with the same transactional
// id and aborts its open transaction) and reads the committed progress of
// the sink on opts.Slot, trusting only a record its own producer wrote
// (readProgress).
func (s *Sink) Resume(ctx context.Context, opts publish.ResumeOptions) (publish.Resumed, error) {
	if !s.exactlyOnce {
		return publish.Resumed{}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.txn != nil {
		s.txn.client.Close()
	}
	s.txn = &txnState{slot: opts.Slot, id: TransactionalID(opts.Slot, s.name), key: []byte(opts.Slot + "/" + s.name),
		walEnd: opts.WALEnd, pids: map[int64]bool{}}
	if err := s.ensureProgressTopic(ctx); err != nil {
		s.txn.broken = true
		return publish.Resumed{}, err
	}
	return s.restartTxn(ctx)
}

// restartTxn starts a new transactional producer, reads the committed
// progress and raises the committed position to it.
func (s *Sink) restartTxn(ctx context.Context) (publish.Resumed, error) {
	t := s.txn
	if t.client != nil {
		t.client.Close()
		t.client = nil
	}
	t.broken = true
	opts := append(append([]kgo.Opt{}, s.opts...), kgo.TransactionalID(t.id), kgo.MaxBufferedRecords(s.batchSize+1))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return publish.Resumed{}, fmt.Errorf("kafka: sink %s: %w", s.name, err)
	}
	t.client = cl
	ictx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pid, epoch, err := cl.ProducerID(ictx)
	if err != nil {
		return publish.Resumed{}, s.txnError(fmt.Sprintf("starting the transactional producer %q", t.id), err)
	}
	t.pids[pid], t.epoch = true, epoch
	res, refused, err := s.readProgress(ctx)
	if err != nil {
		return publish.Resumed{}, err
	}
	for _, f := range refused {
		s.reportForged(f)
	}
	if res.Found {
		t.raise(res.Pos)
	}
	t.broken = false
	s.log.Info().Str("transactional_id", t.id).Int64("producer_id", pid).Int16("producer_epoch", epoch).Str("progress_topic", s.progressTopic).
		Bool("found", res.Found).Str("commit_lsn", res.Pos.CommitLSN.String()).Str("lsn", res.Pos.LSN.String()).Uint32("seq", res.Pos.Seq).
		Msg("kafka sink with exactly_once: transactional producer started, other instances with this id fenced")
	return res, nil
}

// txnError wraps err from a transactional step: Permanent when Kafka says
// another producer took over the transactional id or the principal may
// not use it, transient otherwise.
func (s *Sink) txnError(what string, err error) error {
	err = fmt.Errorf("kafka: %s: %w", what, err)
	switch v := classify(err, s.autoCreate); {
	case v.permanent && v.hint != "":
		return publish.Permanent(fmt.Errorf("%w; %s", err, v.hint))
	case v.permanent:
		return publish.Permanent(err)
	}
	return err
}

// ensureProgressTopic creates the progress topic, compacted with one
// partition, unless it exists.
func (s *Sink) ensureProgressTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if n, err := s.progressPartitions(ctx); err != nil || n > 0 {
		return err
	}
	adm := s.admin()
	adm.SetTimeoutMillis(int32(s.timeout / time.Millisecond))
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, s.progressTopic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		err = fmt.Errorf("kafka: creating the progress topic %q: %w", s.progressTopic, err)
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return publish.Permanent(fmt.Errorf("%w; create it (cleanup.policy=compact, 1 partition) or grant the principal CREATE on it", err))
		}
		return err
	}
	return nil
}

// admin returns the admin client over the sink's producer.
func (s *Sink) admin() *kadm.Client { return kadm.NewClient(s.client) }

// progressPartitions returns the number of partitions of the progress
// topic, 0 when it does not exist.
func (s *Sink) progressPartitions(ctx context.Context) (int, error) {
	topics, err := s.admin().ListTopics(ctx, s.progressTopic)
	if err != nil {
		return 0, fmt.Errorf("kafka: looking up the progress topic %q: %w", s.progressTopic, err)
	}
	t, ok := topics[s.progressTopic]
	switch {
	case !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition):
		return 0, nil
	case t.Err != nil:
		return 0, s.txnError(fmt.Sprintf("looking up the progress topic %q", s.progressTopic), t.Err)
	}
	return len(t.Partitions), nil
}

// readProgress reads the sink's last committed progress record: it lists
// the partition's offsets (progressOffsets), then reads the partition from
// its start with isolation level read_committed up to the end (control
// records kept: they end each transaction, and the record before the last
// stable offset, which is never of an aborted transaction, is always
// seen). It returns the position of the last record of the sink's key
// that trust accepts, and each record of the key after it that trust
// refuses (counted in Refused).
func (s *Sink) readProgress(ctx context.Context) (publish.Resumed, []refusal, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*s.timeout)
	defer cancel()
	n, err := s.progressPartitions(ctx)
	if err != nil || n == 0 {
		return publish.Resumed{}, nil, err
	}
	t := s.txn
	part := kgo.StickyKeyPartitioner(nil).ForTopic(s.progressTopic).Partition(&kgo.Record{Key: t.key}, n)
	start, end, err := s.progressOffsets(ctx, int32(part))
	if err != nil || end <= start {
		return publish.Resumed{}, nil, err
	}
	opts := append(append([]kgo.Opt{}, s.opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.progressTopic: {int32(part): kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return publish.Resumed{}, nil, fmt.Errorf("kafka: sink %s: %w", s.name, err)
	}
	defer cl.Close()
	// The key's records in offset order, each with its transaction: a
	// producer's records between two of its control records (a
	// transaction's end). The sink writes one progress record per
	// transaction, so a transaction with more of its key holds one it did
	// not write. A transaction whose end is not seen (librdkafka's mock
	// writes no markers) is not counted.
	type cand struct {
		r   *kgo.Record
		txn int // index in txns; -1 outside a transaction
	}
	var (
		cands []cand
		txns  []int             // records of the key in each transaction
		ended []bool            // the transaction's control record was seen
		open  = map[int64]int{} // each producer's open transaction
	)
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return publish.Resumed{}, nil, fmt.Errorf("kafka: reading the progress topic %q up to offset %d: %w", s.progressTopic, end, err)
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.Canceled) {
				return publish.Resumed{}, nil, s.txnError(fmt.Sprintf("reading the progress topic %q", s.progressTopic), fe.Err)
			}
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end-1 {
				done = true
			}
			switch {
			case r.Attrs.IsControl():
				if i, ok := open[r.ProducerID]; ok {
					ended[i] = true
					delete(open, r.ProducerID)
				}
			case string(r.Key) != string(t.key):
			case r.Attrs.IsTransactional():
				i, ok := open[r.ProducerID]
				if !ok {
					i = len(txns)
					txns, ended = append(txns, 0), append(ended, false)
					open[r.ProducerID] = i
				}
				txns[i]++
				cands = append(cands, cand{r: r, txn: i})
			default:
				cands = append(cands, cand{r: r, txn: -1})
			}
		})
		if done {
			break
		}
	}
	var (
		res     publish.Resumed
		refused []refusal // after the last accepted record
	)
	for _, c := range cands {
		pos, why := s.trust(c.r)
		if c.txn >= 0 && ended[c.txn] && txns[c.txn] > 1 {
			why = fmt.Sprintf("one of %d progress records of this sink in one transaction (the sink writes one per transaction)", txns[c.txn])
		}
		if why != "" {
			refused = append(refused, refusal{c.r, why})
			continue
		}
		res.Pos, res.Found, refused = pos, true, refused[:0]
	}
	res.Refused = len(refused)
	return res, refused, nil
}

// refusal is a progress record trust refused, and why.
type refusal struct {
	r   *kgo.Record
	why string
}

// trust returns the position of r, a committed record of the sink's key
// on the progress topic, and "" when the sink's own transactional
// producer wrote it: written in a transaction, by a producer id this
// process's producers got for the sink's transactional id, at an epoch
// before the current one (each new producer bumps it), with a value
// naming this slot and sink, at a position not past the server's WAL.
// Otherwise it says why not. A producer id that changed (the
// transactional id expired after transactional.id.expiration.ms unused,
// or its epochs ran out) is refused too: the sink then resumes from the
// progress table, which costs duplicates, never a skipped message
// (docs/security.md, "Progress topic").
func (s *Sink) trust(r *kgo.Record) (publish.Position, string) {
	t := s.txn
	switch {
	case !r.Attrs.IsTransactional():
		return publish.Position{}, "written outside a transaction (the sink writes its progress only in its own transactions)"
	case !t.pids[r.ProducerID]:
		return publish.Position{}, fmt.Sprintf("written by producer id %d, not by this sink's transactional producer (transactional id %q, producer id %s)"+
			"; if nothing else wrote it, the transactional id expired unused (transactional.id.expiration.ms) or its epochs ran out, and Kafka gave it a new producer id",
			r.ProducerID, t.id, pidList(t.pids))
	case r.ProducerEpoch > t.epoch:
		return publish.Position{}, fmt.Sprintf("written at producer epoch %d, after this sink's current epoch %d", r.ProducerEpoch, t.epoch)
	}
	var v progressValue
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return publish.Position{}, fmt.Sprintf("its value is not a progress record: %v", err)
	}
	if v.Slot != t.slot || v.Sink != s.name {
		return publish.Position{}, fmt.Sprintf("its value names slot %q and sink %q", v.Slot, v.Sink)
	}
	pos, err := v.position()
	if err != nil {
		return publish.Position{}, fmt.Sprintf("its value is not a progress record: %v", err)
	}
	if t.walEnd != 0 && pos.CommitLSN > t.walEnd {
		return publish.Position{}, fmt.Sprintf("its commit_lsn %s is past the server's WAL position %s", pos.CommitLSN, t.walEnd)
	}
	return pos, ""
}

// pidList names the producer ids in pids.
func pidList(pids map[int64]bool) string {
	var out []string
	for id := range pids {
		out = append(out, strconv.FormatInt(id, 10))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// forgedAdvice is what to do about a forged progress record.
const forgedAdvice = "the sink resumes from the progress table instead (messages after that position are sent again: duplicates, nothing skipped). " +
	"Find who wrote it (the brokers' audit log) and leave WRITE on the progress topic to the relay's principal alone (docs/security.md, \"Progress topic\")"

// reportForged logs f at error level: what it is, where, and what to do.
func (s *Sink) reportForged(f refusal) {
	s.log.Error().Str("progress_topic", f.r.Topic).Int32("partition", f.r.Partition).Int64("offset", f.r.Offset).
		Int64("producer_id", f.r.ProducerID).Str("key", string(f.r.Key)).Str("value", truncate(f.r.Value, 200)).Str("reason", f.why).
		Msg("kafka sink with exactly_once: forged progress record refused: the sink's own transactional producer did not write it; " + forgedAdvice)
}

// truncate returns b as text, cut to n bytes.
func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

func (v *progressValue) position() (publish.Position, error) {
	c, err := pglogrepl.ParseLSN(v.CommitLSN)
	if err != nil {
		return publish.Position{}, err
	}
	l, err := pglogrepl.ParseLSN(v.LSN)
	if err != nil {
		return publish.Position{}, err
	}
	return publish.Position{CommitLSN: c, LSN: l, Seq: v.Seq}, nil
}

// progressOffsets returns the log start offset of partition part of the
// progress topic and an end to read it to: a last stable offset (where
// read_committed ends) at or past the high watermark of when it was
// called. Waiting for that covers every transaction begun before, the
// sink's own included (its new producer aborted any it left open), also
// when another sink's transaction on the partition was open (the last
// stable offset stops at it, and a progress record of this sink after
// it would be missed). It waits while ctx lasts.
func (s *Sink) progressOffsets(ctx context.Context, part int32) (start, end int64, err error) {
	adm := s.admin()
	list := func(f func(context.Context, ...string) (kadm.ListedOffsets, error)) (int64, error) {
		offsets, err := f(ctx, s.progressTopic)
		if err == nil {
			err = offsets.Error()
		}
		if err != nil {
			return 0, err
		}
		o, ok := offsets.Lookup(s.progressTopic, part)
		if !ok {
			return 0, fmt.Errorf("no answer for partition %d", part)
		}
		return o.Offset, nil
	}
	wrap := func(err error) error {
		return fmt.Errorf("kafka: listing the offsets of the progress topic %q: %w", s.progressTopic, err)
	}
	if start, err = list(adm.ListStartOffsets); err != nil {
		return 0, 0, wrap(err)
	}
	hw, err := list(adm.ListEndOffsets)
	if err != nil {
		return 0, 0, wrap(err)
	}
	for {
		if end, err = list(adm.ListCommittedOffsets); err != nil { // the last stable offset
			return 0, 0, wrap(err)
		}
		if end >= hw {
			return start, end, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, wrap(fmt.Errorf("a transaction is still open before offset %d (another sink's on the same partition?): %w", hw, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// progressRecord returns the progress record for a transaction whose last
// message is m.
func (s *Sink) progressRecord(m *message.Message) kgo.Record {
	v, _ := json.Marshal(progressValue{Slot: s.txn.slot, Sink: s.name,
		CommitLSN: m.CommitLSN.String(), LSN: m.LSN.String(), Seq: m.Seq})
	return kgo.Record{Topic: s.progressTopic, Key: s.txn.key, Value: v, Timestamp: time.Now()}
}

// publishTxn publishes msgs (recs[i] is the record of msgs[i]) as one
// transaction with their progress. It returns nil once Kafka committed
// it. On an error nothing of the transaction is durable, except what an
// earlier transaction of unknown outcome turns out to have committed
// (reported with publish.Partial): the next call starts a new producer
// and reads the progress first.
//
// A message at or before the committed position (txnState.committed) is
// never sent again: it is left out of the transaction and reported
// durable. Before a restart of the producer that is a replay (the
// replication connection dropped inside a PostgreSQL transaction and the
// server sent it again from its start): it is logged and counted. So the
// progress record, the position of the transaction's last message, only
// moves forward. A deliberate re-send of an older message (cdc
// dead-letter resend, the console's resend) must therefore never come
// through a resumed sink: those open a sink of their own without Resume
// (publishing with the idempotent producer), and the relay does not lend
// a publish.Resumer (relay.Relay.Lent).
func (s *Sink) publishTxn(ctx context.Context, msgs []*message.Message, recs []kgo.Record) error {
	t := s.txn
	total := len(msgs)
	done := make([]bool, total)
	replayed := 0
	for i, m := range msgs {
		if t.covers(m) {
			done[i] = true
			replayed++
		}
	}
	if t.broken {
		if _, err := s.restartTxn(ctx); err != nil {
			return publish.Partial(fmt.Errorf("kafka: publishing %s: restarting the transactional producer after an earlier failure: %w", publish.DescribeCall(msgs), err), done)
		}
		// restartTxn raised committed to what the transaction of unknown
		// outcome committed, if it did.
		for i, m := range msgs {
			done[i] = t.covers(m)
		}
	}
	s.noteReplay(msgs, replayed)
	keep := make([]int, 0, total)
	for i := range msgs {
		if !done[i] {
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		return nil // every message is in Kafka already
	}
	if len(keep) < total {
		kmsgs, krecs := make([]*message.Message, len(keep)), make([]kgo.Record, len(keep))
		for j, i := range keep {
			kmsgs[j], krecs[j] = msgs[i], recs[i]
		}
		msgs, recs = kmsgs, krecs
	}
	last := msgs[len(msgs)-1]
	if t.covers(last) { // cannot happen: covered messages were left out
		return fmt.Errorf("kafka: publishing %s: the progress record would go back to %s from %s", publish.DescribeCall(msgs), last.LSN, t.committed.LSN)
	}
	if err := t.client.BeginTransaction(); err != nil {
		t.broken = true
		return publish.Partial(fmt.Errorf("kafka: publishing %s: beginning a transaction: %w", publish.DescribeCall(msgs), err), done)
	}
	t.broken = true // until committed
	all := append(recs[:len(recs):len(recs)], s.progressRecord(last))
	// Groups of batch_size messages and, in the last, the progress record
	// (the producer buffers one record more: restartTxn).
	c, errs, err := s.produce(ctx, t.client, all, s.batchSize+1)
	if err != nil {
		s.abort(ctx, t)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return publish.Partial(fmt.Errorf("kafka: publishing %s: %w", publish.DescribeCall(msgs), ctxErr), done)
		}
		named := append(msgs[:len(msgs):len(msgs)], last) // the progress record is named after the last message
		return publish.Partial(s.failed(ctx, t.client, c, named, all, errs, len(msgs), total), done)
	}
	// Not canceled with ctx: a commit cut short leaves its outcome
	// unknown (the next call then reads the progress).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	if err := t.client.EndTransaction(cctx, kgo.TryCommit); err != nil {
		return publish.Partial(s.txnError(fmt.Sprintf("committing the transaction of %s", publish.DescribeCall(msgs)), err), done)
	}
	t.broken = false
	t.raise(publish.PositionOf(last))
	if pid, _, err := t.client.ProducerID(cctx); err == nil {
		t.pids[pid] = true // a new one when the epochs ran out at this commit
	}
	return nil
}

// noteReplay logs and counts the n messages of msgs the guard drops: a warning when a replay reaches the guard, and when it is
// over, how many messages it did not send again (a replay spans many
// calls: one line each would flood the log).
func (s *Sink) noteReplay(msgs []*message.Message, n int) {
	t := s.txn
	switch {
	case n > 0 && t.replaying == 0:
		s.log.Warn().Str("first", msgs[0].ID).Str("lsn", msgs[0].LSN.String()).
			Str("committed_commit_lsn", t.committed.CommitLSN.String()).Str("committed_lsn", t.committed.LSN.String()).
			Msg("kafka sink with exactly_once: a replay reached the exactly-once guard: messages Kafka already holds from this sink are handed to it again " +
				"(the replication connection dropped inside a transaction?); they are not sent again")
	case n == 0 && t.replaying > 0:
		s.log.Info().Int("messages", t.replaying).Msg("kafka sink with exactly_once: the replay is over; the exactly-once guard did not send its messages again")
		t.replaying = 0
	}
	t.replaying += n
	if n > 0 && s.counters.ReplaysDropped != nil {
		s.counters.ReplaysDropped.Add(float64(n))
	}
}

// abortWait bounds abort: what it does not finish in that time (records
// still in flight to a broker cut off), the next producer does.
const abortWait = time.Second

// abort ends a failed transaction while ctx lasts, so that read_committed
// consumers need not wait for it and the next call needs no new producer
// (t is no longer broken once the abort went through); whatever is left
// open, the next producer aborts when it starts (t stays broken).
func (s *Sink) abort(ctx context.Context, t *txnState) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, min(s.timeout, abortWait))
	defer cancel()
	if err := t.client.AbortBufferedRecords(ctx); err != nil {
		return
	}
	if err := t.client.EndTransaction(ctx, kgo.TryAbort); err == nil {
		t.broken = false
	}
}

// CheckProgress reads the sink's committed progress on slot as Resume
// does, without taking anything over (cdc status: the transactional
// producer's id is asked of the transaction coordinator, no producer
// starts), and describes each progress record a relay would refuse as
// forged (trust). walEnd is the server's WAL position. It returns nil
// without exactly_once.
func (s *Sink) CheckProgress(ctx context.Context, slot string, walEnd pglogrepl.LSN) ([]string, error) {
	if !s.exactlyOnce {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &txnState{slot: slot, id: TransactionalID(slot, s.name), key: []byte(slot + "/" + s.name), walEnd: walEnd,
		pids: map[int64]bool{}, epoch: math.MaxInt16}
	pid, err := s.currentProducerID(ctx, t.id)
	if err != nil {
		return nil, err
	}
	if pid >= 0 {
		t.pids[pid] = true
	}
	prev := s.txn
	s.txn = t
	defer func() { s.txn = prev }()
	_, refused, err := s.readProgress(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range refused {
		out = append(out, fmt.Sprintf("sink %s: forged progress record on topic %s partition %d offset %d (%s); a relay does not resume from it: %s",
			s.name, f.r.Topic, f.r.Partition, f.r.Offset, f.why, forgedAdvice))
	}
	return out, nil
}

// currentProducerID returns the producer id the transaction coordinator
// holds for the transactional id, -1 when it holds none.
func (s *Sink) currentProducerID(ctx context.Context, id string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	described, err := s.admin().DescribeTransactions(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("kafka: describing the transactional id %q: %w", id, err)
	}
	d, ok := described[id]
	switch {
	case !ok || errors.Is(d.Err, kerr.TransactionalIDNotFound):
		return -1, nil
	case d.Err != nil:
		return 0, fmt.Errorf("kafka: describing the transactional id %q: %w", id, d.Err)
	}
	return d.ProducerID, nil
}
