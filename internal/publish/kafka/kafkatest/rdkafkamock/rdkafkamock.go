// Package rdkafkamock runs librdkafka's mock Kafka cluster for tests: a
// second Kafka implementation beside franz-go's kfake (package kafkatest),
// written by other authors, so that the kafka sink is not tested only
// against a broker from the author of its producer (docs/testing.md,
// "Kafka: two implementations").
//
// The cluster runs in a child process, mockcluster (a small cgo program
// behind the walpost_rdkafka build tag, linked against Debian's
// librdkafka-dev), which Start builds once into a cache and drives over
// its standard input. Where it cannot be built (no C compiler, no
// librdkafka-dev) Start skips the test with a message saying what to
// install.
package rdkafkamock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
)

// Cluster is a running librdkafka mock cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	addrs   []string
	brokers int

	mu   sync.Mutex
	in   io.WriteCloser
	out  *bufio.Scanner
	cmd  *exec.Cmd
	down bool
}

// Start starts a mock cluster of brokers brokers (ids 1 to brokers) with
// topics (name → partitions) and stops it when the test ends. It skips
// the test when the helper cannot be built here.
func Start(t testing.TB, brokers int, topics map[string]int) *Cluster {
	t.Helper()
	bin := build(t)
	cmd := exec.Command(bin, fmt.Sprint(brokers))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting librdkafka's mock cluster: %v", err)
	}
	c := &Cluster{in: in, out: bufio.NewScanner(stdout), cmd: cmd, brokers: brokers}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	if !c.out.Scan() {
		t.Fatalf("librdkafka's mock cluster printed no bootstrap line: %s", stderr.String())
	}
	line, ok := strings.CutPrefix(c.out.Text(), "bootstrap ")
	if !ok {
		t.Fatalf("librdkafka's mock cluster: unexpected first line %q", c.out.Text())
	}
	c.addrs = strings.Split(line, ",")
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c.Do(t, "topic %s %d", name, topics[name])
	}
	return c
}

// ProtocolVersion is the Kafka release whose request versions a client
// of the mock keeps to (the kafka sink's protocol_version): librdkafka
// 2.0's mock answers an ApiVersions request of v3 or later (Kafka 2.4's)
// in a form franz-go cannot read, a request above what it knows with an
// UNSUPPORTED_VERSION answer that is not in v0's form (as KIP-511 asks),
// and ListOffsets v5 (Kafka 2.2's) with offsets franz-go misreads. Kafka
// 2.1's protocol has ApiVersions v2 and ListOffsets v4. docs/testing.md,
// "Kafka: two implementations", lists what else the two disagree on.
const ProtocolVersion = "2.1"

// MaxVersions is ProtocolVersion's request versions, for a client of the
// mock (kgo.MaxVersions).
func MaxVersions() *kversion.Versions { return kversion.FromString(ProtocolVersion) }

// Addrs returns the brokers' host:port addresses.
func (c *Cluster) Addrs() []string { return c.addrs }

// Do sends the helper one command (see mockcluster's documentation) and
// fails the test when it is refused.
func (c *Cluster) Do(t testing.TB, format string, args ...any) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := fmt.Sprintf(format, args...)
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		t.Fatalf("mock cluster: %s: %v", cmd, err)
	}
	if !c.out.Scan() {
		t.Fatalf("mock cluster: %s: no answer", cmd)
	}
	if ans := c.out.Text(); ans != "ok" {
		t.Fatalf("mock cluster: %s: %s", cmd, ans)
	}
}

// Outage takes every broker off the network (their listeners and
// connections closed) and returns the function that brings them back with
// their data.
func (c *Cluster) Outage(t testing.TB) (restore func()) {
	for id := 1; id <= c.brokers; id++ {
		c.Do(t, "down %d", id)
	}
	return func() {
		for id := 1; id <= c.brokers; id++ {
			c.Do(t, "up %d", id)
		}
	}
}

// FailNext makes the next len(errs) requests of key fail with errs, in
// turn (on whichever broker they reach).
func (c *Cluster) FailNext(t testing.TB, key kmsg.Key, errs ...error) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "errors %d", int16(key))
	for _, err := range errs {
		var ke *kerr.Error
		if !errors.As(err, &ke) {
			t.Fatalf("FailNext: %v is not a Kafka error code", err)
		}
		fmt.Fprintf(&b, " %d", ke.Code)
	}
	c.Do(t, "%s", b.String())
}

// ReadAll reads every record of topic up to each partition's high
// watermark, partition by partition, in offset order.
func (c *Cluster) ReadAll(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	return c.read(t, topic, false)
}

// ReadCommitted reads what a read_committed consumer sees of topic, up to
// each partition's last stable offset, partition by partition, in offset
// order: records of aborted transactions and control records are left out.
func (c *Cluster) ReadCommitted(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	return c.read(t, topic, true)
}

func (c *Cluster) read(t testing.TB, topic string, committed bool) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return kafkatest.ReadTo(t, c.addrs, topic, c.ends(ctx, t, topic, committed), committed, kgo.MaxVersions(MaxVersions()))
}

// ends returns each partition's high watermark, or with committed its
// last stable offset (ListOffsets, latest, at that isolation level).
func (c *Cluster) ends(ctx context.Context, t testing.TB, topic string, committed bool) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.MaxVersions(MaxVersions()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata of %q: %v", topic, err)
	}
	if len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("topic %q does not exist", topic)
	}
	// One partition a request: the mock answers a request of several
	// partitions led by one broker with some of them garbled.
	end := map[int32]int64{}
	for _, p := range mresp.Topics[0].Partitions {
		req := kmsg.NewPtrListOffsetsRequest()
		if committed {
			req.IsolationLevel = 1
		}
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p.Partition
		rp.Timestamp = -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		for _, sh := range cl.RequestSharded(ctx, req) {
			if sh.Err != nil {
				t.Fatalf("listing offsets of %s[%d]: %v", topic, p.Partition, sh.Err)
			}
			for _, rt := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
				for _, rp := range rt.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil || rp.Partition != p.Partition {
						t.Fatalf("listing offsets of %s[%d]: partition %d, %v", topic, p.Partition, rp.Partition, err)
					}
					end[rp.Partition] = rp.Offset
				}
			}
		}
	}
	return end
}

// build builds mockcluster once per machine and source, into a cache
// shared by every test binary (WALPOST_RDKAFKA_CACHE moves it), and
// returns its path; it skips the test, saying what to install, when the
// helper cannot be built.
func build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { buildPath, buildErr = buildHelper() })
	if buildErr != nil {
		t.Skipf("librdkafka's mock Kafka cluster is not available (%v): install a C compiler and Debian's librdkafka-dev (.ci/run does) to run this test against a second Kafka implementation", buildErr)
	}
	return buildPath
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

func buildHelper() (string, error) {
	if _, err := os.Stat("/usr/include/librdkafka/rdkafka_mock.h"); err != nil {
		return "", errors.New("no /usr/include/librdkafka/rdkafka_mock.h")
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find the helper's source")
	}
	src := filepath.Join(filepath.Dir(file), "mockcluster")
	dir := os.Getenv("WALPOST_RDKAFKA_CACHE")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "walpost-rdkafka")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "mockcluster")
	// go build is incremental (its own cache): a rebuild of an unchanged
	// source only links, in well under a second. Built to a temporary name
	// and renamed, so that test binaries building at once never run a half
	// written file.
	tmp, err := os.CreateTemp(dir, "mockcluster-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	cmd := exec.Command("go", "build", "-tags", "walpost_rdkafka", "-o", tmp.Name(), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("go build -tags walpost_rdkafka: %v: %s", err, strings.TrimSpace(string(b)))
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
