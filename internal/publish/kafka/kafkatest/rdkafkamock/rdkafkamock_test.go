package rdkafkamock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceTransactionAndReadBack checks the helper itself: a plain and
// a transactional producer write, and everything is read back, also
// after an outage. It also pins down what the mock does not do (docs/testing.md,
// "Kafka: two implementations"): it writes no transaction markers and
// aborts nothing, so that read_committed sees an aborted transaction's
// records. Should a newer librdkafka hide them, this test says so.
func TestProduceTransactionAndReadBack(t *testing.T) {
	c := Start(t, 3, map[string]int{"t": 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic("t"), kgo.MaxVersions(MaxVersions()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i % 3)), Value: []byte("plain")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic("t"), kgo.TransactionalID("x"), kgo.MaxVersions(MaxVersions()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for _, commit := range []kgo.TransactionEndTry{kgo.TryAbort, kgo.TryCommit} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if err := tx.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(commit))}).FirstErr(); err != nil {
				t.Fatalf("transactional produce: %v", err)
			}
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("ending the transaction: %v", err)
		}
	}
	if n := len(c.ReadAll(t, "t")); n != 20 {
		t.Errorf("read %d records, want 20 (10 plain, 5 aborted, 5 committed)", n)
	}
	if n := len(c.ReadCommitted(t, "t")); n != 20 {
		t.Errorf("read_committed read %d records: the mock now hides aborted transactions (want 20, as librdkafka 2.0's mock does): update docs/testing.md and the exactly-once tests on the mock", n)
	}
	restore := c.Outage(t)
	restore()
	if n := len(c.ReadAll(t, "t")); n != 20 {
		t.Errorf("after an outage read %d records, want 20", n)
	}
}
