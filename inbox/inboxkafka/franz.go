package inboxkafka

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FranzReader is a Reader over a franz-go consumer-group client, for
// topics that a walpost kafka sink writes with exactly_once: true. Its
// batches are Kafka transactions, and a consumer must leave out the
// transaction markers and the records of aborted transactions; franz-go
// does (with kgo.FetchIsolationLevel(kgo.ReadCommitted())), kafka-go's
// Reader (v0.4) does neither: it hands both to Loop as messages.
//
// FetchMessage and CommitMessages are called from Loop's goroutine only;
// a FranzReader is not safe for concurrent use. Close the client after
// Loop returned.
type FranzReader struct {
	cl  *kgo.Client
	buf []*kgo.Record
}

var _ Reader = (*FranzReader)(nil)

// NewFranzReader returns a Reader over cl, a consumer-group client:
// kgo.ConsumerGroup and kgo.ConsumeTopics set, kgo.DisableAutoCommit
// (Loop commits each message's offset after its effect committed), and,
// for exactly_once topics, kgo.FetchIsolationLevel(kgo.ReadCommitted()).
func NewFranzReader(cl *kgo.Client) *FranzReader { return &FranzReader{cl: cl} }

// FetchMessage returns the next record, as a kafka-go message (topic,
// partition, offset, key, value, headers, time), without committing its
// offset. It returns an error wrapping io.EOF once the client is closed.
func (r *FranzReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
	for len(r.buf) == 0 {
		fs := r.cl.PollRecords(ctx, 1000)
		if fs.IsClientClosed() {
			return kafka.Message{}, fmt.Errorf("inboxkafka: the franz-go client is closed: %w", io.EOF)
		}
		if err := ctx.Err(); err != nil {
			return kafka.Message{}, err
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, context.DeadlineExceeded) {
				return kafka.Message{}, fmt.Errorf("inboxkafka: fetching %s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		r.buf = fs.Records()
	}
	rec := r.buf[0]
	r.buf[0] = nil
	r.buf = r.buf[1:]
	m := kafka.Message{Topic: rec.Topic, Partition: int(rec.Partition), Offset: rec.Offset,
		Key: rec.Key, Value: rec.Value, Time: rec.Timestamp}
	for _, h := range rec.Headers {
		m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: h.Value})
	}
	return m, nil
}

// CommitMessages commits, synchronously, the offsets after msgs.
func (r *FranzReader) CommitMessages(ctx context.Context, msgs ...kafka.Message) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, m := range msgs {
		if offsets[m.Topic] == nil {
			offsets[m.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[m.Topic][int32(m.Partition)] = kgo.EpochOffset{Epoch: -1, Offset: m.Offset + 1}
	}
	var cerr error
	r.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("inboxkafka: committing offsets: %w", cerr)
	}
	return nil
}

// readsCommitted reports whether r's client reads with read_committed.
func (r *FranzReader) readsCommitted() bool {
	l, ok := r.cl.OptValue(kgo.FetchIsolationLevel).(int8) // kgo reports the level as its wire value
	return ok && l == 1

}
