// Package kafkatest runs an in-process Kafka-protocol cluster (franz-go's
// kfake) on 127.0.0.1 for tests, with brokers that can be taken off the
// network and brought back with their data, and reads topics back.
package kafkatest

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Addrs returns the brokers' host:port addresses.
func (fk *Cluster) Addrs() []string { return fk.addrs }

// cutListener is a broker's listener that a test can cut and restore, to
// simulate the broker going down and coming back with its data: Cut closes
// the socket (new connections are refused: ECONNREFUSED) and every
// connection accepted so far (clients see resets); Restore listens on the
// same address again. kfake's accept loop never notices: Accept blocks
// while the listener is cut.
type cutListener struct {
	addr string

	mu     sync.Mutex
	cond   *sync.Cond
	inner  net.Listener // nil while cut
	conns  map[net.Conn]struct{}
	closed bool
}

func listenCuttable(network, address string) (*cutListener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	l := &cutListener{addr: ln.Addr().String(), inner: ln, conns: map[net.Conn]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

func (l *cutListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		for l.inner == nil && !l.closed {
			l.cond.Wait()
		}
		if l.closed {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		inner := l.inner
		l.mu.Unlock()

		c, err := inner.Accept()
		l.mu.Lock()
		if err != nil {
			if l.closed || l.inner == inner {
				l.mu.Unlock()
				return nil, err
			}
			l.mu.Unlock()
			continue // cut while accepting: wait for the restore
		}
		if l.inner != inner || l.closed {
			l.mu.Unlock()
			c.Close()
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

// Cut takes the broker off the network until Restore.
func (l *cutListener) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inner == nil {
		return
	}
	l.inner.Close()
	l.inner = nil
	for c := range l.conns {
		c.(*trackedConn).Conn.Close()
		delete(l.conns, c)
	}
}

// Restore listens on the broker's address again.
func (l *cutListener) Restore() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inner != nil || l.closed {
		return nil
	}
	var err error
	for range 100 { // the port may linger briefly
		var ln net.Listener
		if ln, err = net.Listen("tcp", l.addr); err == nil {
			l.inner = ln
			l.cond.Broadcast()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("re-listening on %s: %w", l.addr, err)
}

func (l *cutListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.cond.Broadcast()
	if l.inner != nil {
		return l.inner.Close()
	}
	return nil
}

func (l *cutListener) Addr() net.Addr {
	a, _ := net.ResolveTCPAddr("tcp", l.addr)
	return a
}

type trackedConn struct {
	net.Conn
	l    *cutListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// Cluster is an in-process Kafka cluster (kfake) whose brokers can be
// taken off the network.
type Cluster struct {
	*kfake.Cluster
	addrs []string
	lns   []*cutListener
}

// Start starts a kfake cluster on 127.0.0.1 with the given options
// (one broker unless kfake.NumBrokers says otherwise) and closes it when
// the test ends.
func Start(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	fk := &Cluster{}
	var mu sync.Mutex
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(func(network, address string) (net.Listener, error) {
		l, err := listenCuttable(network, address)
		if err == nil {
			mu.Lock()
			fk.lns = append(fk.lns, l)
			mu.Unlock()
		}
		return l, err
	})}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	fk.Cluster = c
	fk.addrs = c.ListenAddrs()
	t.Cleanup(c.Close)
	return fk
}

// Outage takes every broker off the network and returns the function that
// brings them back.
func (fk *Cluster) Outage(t testing.TB) (restore func()) {
	for _, l := range fk.lns {
		l.Cut()
	}
	return func() {
		for _, l := range fk.lns {
			if err := l.Restore(); err != nil {
				t.Errorf("restoring broker: %v", err)
			}
		}
	}
}

// ReadAll reads every record of topic from offset 0 to the high watermark
// of each partition, partition by partition, in offset order.
func (fk *Cluster) ReadAll(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	infos := fk.PartitionInfos(topic)
	if infos == nil {
		t.Fatalf("topic %q does not exist", topic)
	}
	end := map[int32]int64{}
	for _, pi := range infos {
		end[pi.Partition] = pi.HighWatermark
	}
	return ReadTo(t, fk.addrs, topic, end, false)
}

// ReadCommitted reads what a consumer with isolation.level=read_committed
// sees of topic: every record of a committed transaction or written
// outside one, up to each partition's last stable offset, partition by
// partition, in offset order. Records of aborted transactions, and
// transaction markers, are left out. Call it when no transaction is open
// (or only what is before the open one is read).
func (fk *Cluster) ReadCommitted(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	infos := fk.PartitionInfos(topic)
	if infos == nil {
		t.Fatalf("topic %q does not exist", topic)
	}
	end := map[int32]int64{}
	for _, pi := range infos {
		end[pi.Partition] = pi.LastStableOffset
	}
	return ReadTo(t, fk.addrs, topic, end, true)
}

// ReadTo reads topic from offset 0 up to end (partition → offset: a high
// watermark, or with committed a last stable offset) from the brokers at
// seeds, partition by partition, in offset order; with committed as a
// read_committed consumer does (records of aborted transactions left
// out). Control records are left out either way. extra adds client
// options (a kgo.MaxVersions).
func ReadTo(t testing.TB, seeds []string, topic string, end map[int32]int64, committed bool, extra ...kgo.Opt) []*kgo.Record {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p, e := range end {
		if e > 0 {
			offsets[p] = kgo.NewOffset().At(0)
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(50 * time.Millisecond), kgo.FetchMaxBytes(64 << 20), kgo.FetchMaxPartitionBytes(64 << 20)}, extra...)
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	per := map[int32][]*kgo.Record{}
	left := len(offsets)
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d partitions of %q not read to their end before the deadline", left, topic)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetching %s[%d]: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			e := end[r.Partition]
			if r.Offset >= e {
				return
			}
			if !r.Attrs.IsControl() {
				per[r.Partition] = append(per[r.Partition], r)
			}
			if r.Offset == e-1 {
				left--
			}
		})
	}
	parts := make([]int32, 0, len(per))
	for p := range per {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var out []*kgo.Record
	for _, p := range parts {
		out = append(out, per[p]...)
	}
	return out
}
