// Package fauxqs runs fauxqs, an independent SQS and SNS emulator (npm,
// MIT, pinned in testdata/package-lock.json), for the sqs and sns sinks'
// tests and the cdc binary's, beside the project's own stand-ins
// (sqsfake, snsfake), which decide the services' behaviour themselves.
// fauxqs speaks SQS's AWS JSON 1.0 protocol with FIFO queues, message
// groups and deduplication, SNS's query protocol with PublishBatch, FIFO
// topics and fan-out to SQS subscriptions; docs/testing.md says where it
// and the stand-ins disagree.
//
// Start installs it once per machine with npm ci into a cache under
// /var/tmp (CacheDir), and skips the test, saying why, without node and
// npm or when the registry cannot be reached. fauxqs asks for Node.js 22;
// on older versions (20.6 and later) its only use of a newer module,
// node:sqlite for persistence the tests never turn on, is stubbed
// (testdata/hooks.mjs).
//
// The sinks reach it through a tcpproxy (URL), so that Outage can cut
// them off; the test's own requests (CreateQueue, Drain) go straight to
// it. A Server is safe for concurrent use.
package fauxqs

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	snsapi "github.com/aws/aws-sdk-go-v2/service/sns"
	sqsapi "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sys/unix"

	"github.com/walpost/walpost/internal/tcpproxy"
	"github.com/walpost/walpost/internal/testutil"
)

// Version is the fauxqs version the tests run (testdata/package.json).
const Version = "2.4.1"

// Account is the account id in fauxqs's queue URLs and topic ARNs.
const Account = "000000000000"

// CacheDir is where Start installs fauxqs: $WALPOST_FAUXQS_CACHE, else
// /var/tmp/walpost-fauxqs (kept across sessions of the machine).
func CacheDir() string {
	if d := os.Getenv("WALPOST_FAUXQS_CACHE"); d != "" {
		return d
	}
	return "/var/tmp/walpost-fauxqs"
}

// Server is one running fauxqs.
type Server struct {
	direct string // http://127.0.0.1:port
	proxy  *tcpproxy.Proxy
	sqs    *sqsapi.Client
	sns    *snsapi.Client

	mu      sync.Mutex
	drained map[string][]Message // queue name → what Drain took, in order
}

// Message is a message Drain received from a queue.
type Message struct {
	Body       string
	Attributes map[string]string // String message attributes
	GroupID    string
	DedupID    string
}

var (
	installMu sync.Mutex
)

// testdata returns the directory of server.mjs and the package files.
func testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata")
}

// Start starts fauxqs for the test and stops it when the test ends; it
// skips the test when fauxqs cannot be had here (no node or npm, Node.js
// older than 20.6, no registry), saying why.
func Start(tb testing.TB) *Server {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Skip("fauxqs: node is not on PATH; the independent SQS/SNS emulator needs Node.js and npm (apt-get install nodejs npm)")
	}
	dir, err := install()
	if err != nil {
		tb.Skipf("fauxqs %s cannot be installed here, the tests against it are skipped: %v", Version, err)
	}
	stderr := &testutil.Buffer{Max: 1 << 20}
	cmd := exec.Command(node, filepath.Join(testdata(), "server.mjs"), dir)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("fauxqs: starting node: %v", err)
	}
	tb.Cleanup(func() {
		stdin.Close() // server.mjs exits when stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if tb.Failed() && stderr.Len() > 0 {
			tb.Logf("fauxqs stderr:\n%s", stderr.String())
		}
	})
	got := make(chan int, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		var p struct{ Port int }
		if err == nil && json.Unmarshal([]byte(line), &p) == nil {
			got <- p.Port
		}
		close(got)
		io.Copy(io.Discard, stdout)
	}()
	var port int
	select {
	case p, ok := <-got:
		if !ok {
			tb.Fatalf("fauxqs: node exited before announcing its port; stderr:\n%s", stderr.String())
		}
		port = p
	case <-time.After(30 * time.Second):
		tb.Fatalf("fauxqs: node did not announce its port within 30 s; stderr:\n%s", stderr.String())
	}
	s := &Server{direct: "http://127.0.0.1:" + strconv.Itoa(port), drained: map[string][]Message{}}
	if s.proxy, err = tcpproxy.New("127.0.0.1:" + strconv.Itoa(port)); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.proxy.Close)
	cfg := aws.Config{Region: "us-east-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "walpost-test-secret"}, nil
	})}
	s.sqs = sqsapi.NewFromConfig(cfg, func(o *sqsapi.Options) { o.BaseEndpoint = aws.String(s.direct) })
	s.sns = snsapi.NewFromConfig(cfg, func(o *snsapi.Options) { o.BaseEndpoint = aws.String(s.direct) })
	return s
}

// install installs fauxqs with npm ci into a directory of CacheDir named
// after the version and the lock file, unless it is there, and returns
// that directory. Test binaries of several packages may install at once:
// a file lock orders them, and the directory appears whole (rename).
func install() (string, error) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s is not installed (apt-get install nodejs npm)", tool)
		}
	}
	if out, err := exec.Command("node", "-e", `const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||a==20&&b>=6?0:1)`).CombinedOutput(); err != nil {
		return "", fmt.Errorf("Node.js 20.6 or later is needed (module hooks; fauxqs itself asks for 22): %v %s", err, out)
	}
	lock, err := os.ReadFile(filepath.Join(testdata(), "package-lock.json"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(CacheDir(), Version+"-"+hex.EncodeToString(sum[:6]))
	marker := filepath.Join(dir, "node_modules", "fauxqs", "package.json")
	if _, err := os.Stat(marker); err == nil {
		return dir, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	if err := os.MkdirAll(CacheDir(), 0o755); err != nil {
		return "", err
	}
	lf, err := os.OpenFile(filepath.Join(CacheDir(), ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	if _, err := os.Stat(marker); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(CacheDir(), ".install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(testdata(), f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error", "--engine-strict=false")
	cmd.Dir = tmp
	// npm's cache and logs stay in the temporary directory; one retry,
	// soon (without a registry npm's defaults take 70 s to give up).
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(tmp, ".npm"), "npm_config_update_notifier=false",
		"npm_config_fetch_retries=1", "npm_config_fetch_retry_mintimeout=1000", "npm_config_fetch_retry_maxtimeout=2000")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci (fauxqs %s): %v\n%s", Version, err, tail(out))
	}
	os.RemoveAll(filepath.Join(tmp, ".npm"))
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

func tail(b []byte) []byte {
	if len(b) > 1500 {
		return b[len(b)-1500:]
	}
	return b
}

// URL is the endpoint to give a sink (through the proxy).
func (s *Server) URL() string { return "http://" + s.proxy.Addr() }

// Outage cuts the sinks off (every connection closed, new ones refused)
// until the returned function restores them (sinktest.Target.Outage);
// fauxqs keeps running, with what it holds.
func (s *Server) Outage(tb testing.TB) (restore func()) {
	s.proxy.Cut()
	return func() {
		if err := s.proxy.Restore(); err != nil {
			tb.Fatal(err)
		}
	}
}

// Proxy is the proxy the sinks reach fauxqs through, for tests that cut
// or freeze it themselves.
func (s *Server) Proxy() *tcpproxy.Proxy { return s.proxy }

// QueueURL returns the URL of queue name as fauxqs forms it.
func (s *Server) QueueURL(name string) string { return s.direct + "/" + Account + "/" + name }

// CreateQueue creates queue name (FIFO when it ends in ".fifo") with the
// attributes given (e.g. MaximumMessageSize) and returns its name.
func (s *Server) CreateQueue(tb testing.TB, name string, attrs map[string]string) string {
	tb.Helper()
	if strings.HasSuffix(name, ".fifo") {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["FifoQueue"] = "true"
	}
	if _, err := s.sqs.CreateQueue(context.Background(), &sqsapi.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs}); err != nil {
		tb.Fatalf("fauxqs: CreateQueue %s: %v", name, err)
	}
	return name
}

// SetQueueAttributes sets attributes of queue name.
func (s *Server) SetQueueAttributes(tb testing.TB, name string, attrs map[string]string) {
	tb.Helper()
	if _, err := s.sqs.SetQueueAttributes(context.Background(), &sqsapi.SetQueueAttributesInput{QueueUrl: aws.String(s.QueueURL(name)), Attributes: attrs}); err != nil {
		tb.Fatalf("fauxqs: SetQueueAttributes %s: %v", name, err)
	}
}

// CreateTopic creates topic name (FIFO when it ends in ".fifo") and a
// queue of the same name subscribed to it with raw message delivery (the
// message attributes kept as the queue's), and returns the topic's ARN;
// Drain(name) reads what the topic fanned out.
func (s *Server) CreateTopic(tb testing.TB, name string) string {
	tb.Helper()
	ctx := context.Background()
	var attrs map[string]string
	if strings.HasSuffix(name, ".fifo") {
		attrs = map[string]string{"FifoTopic": "true"}
	}
	out, err := s.sns.CreateTopic(ctx, &snsapi.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	if err != nil {
		tb.Fatalf("fauxqs: CreateTopic %s: %v", name, err)
	}
	s.CreateQueue(tb, name, nil)
	arn := "arn:aws:sqs:us-east-1:" + Account + ":" + name
	if _, err := s.sns.Subscribe(ctx, &snsapi.SubscribeInput{TopicArn: out.TopicArn, Protocol: aws.String("sqs"), Endpoint: aws.String(arn),
		Attributes: map[string]string{"RawMessageDelivery": "true"}}); err != nil {
		tb.Fatalf("fauxqs: Subscribe %s: %v", name, err)
	}
	return aws.ToString(out.TopicArn)
}

// Drain receives and deletes every message queue name holds now, and
// returns all it ever took from that queue, in the order received (per
// message group in order on a FIFO queue).
//
// Drain is its queues' only receiver, so a message in flight when a
// receive comes back empty was handed out by a receive whose answer never
// reached Drain (a lost response, which the SDK's retries used to hide:
// seen in CI, ten messages of a standard queue missing, every later
// message of ten groups of a FIFO queue held behind them). Receives are
// therefore not retried by the SDK; a failed one is logged, and Drain
// waits, polling, until such messages come back at the end of their
// visibility timeout (drainVisibility), in order on a FIFO queue, whose
// group stays locked until then.
func (s *Server) Drain(tb testing.TB, name string) []Message {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var deadline time.Time // once messages in flight were seen
	failures := 0
	wait := int32(0)
	for {
		for s.receive(tb, name, wait, &failures) {
		}
		n := s.inFlight(tb, name)
		if n == 0 {
			return append([]Message(nil), s.drained[name]...)
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(drainVisibility + 15*time.Second)
			tb.Logf("fauxqs: Drain %s: %d messages in flight that no receive of Drain's holds (an answer lost); waiting for their visibility timeout to end", name, n)
		} else if time.Now().After(deadline) {
			tb.Fatalf("fauxqs: Drain %s: %d messages still in flight %s after Drain saw them", name, n, drainVisibility+15*time.Second)
		}
		wait = 1 // long polling, until they come back
	}
}

// drainVisibility is the visibility timeout of Drain's receives: long
// enough that no message comes back before Drain deletes it, short enough
// to wait out when an answer is lost.
const drainVisibility = 20 * time.Second

// receive receives up to ten messages of queue name (waiting up to wait
// seconds for one), records and deletes them, and says whether it got
// any. A failed receive is logged and counted in *failures (the test
// fails at the tenth): its messages, if any, stay in flight.
func (s *Server) receive(tb testing.TB, name string, wait int32, failures *int) bool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.sqs.ReceiveMessage(ctx, &sqsapi.ReceiveMessageInput{QueueUrl: aws.String(s.QueueURL(name)), MaxNumberOfMessages: 10,
		VisibilityTimeout: int32(drainVisibility / time.Second), WaitTimeSeconds: wait, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}},
		func(o *sqsapi.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		if *failures++; *failures >= 10 {
			tb.Fatalf("fauxqs: ReceiveMessage %s failed %d times, the last: %v", name, *failures, err)
		}
		tb.Logf("fauxqs: ReceiveMessage %s failed (not retried; what it may have handed out comes back after %s): %v", name, drainVisibility, err)
		return true
	}
	if len(out.Messages) == 0 {
		return false
	}
	del := &sqsapi.DeleteMessageBatchInput{QueueUrl: aws.String(s.QueueURL(name))}
	for i, m := range out.Messages {
		got := Message{Body: aws.ToString(m.Body), Attributes: map[string]string{},
			GroupID: m.Attributes["MessageGroupId"], DedupID: m.Attributes["MessageDeduplicationId"]}
		for k, v := range m.MessageAttributes {
			got.Attributes[k] = aws.ToString(v.StringValue)
		}
		s.drained[name] = append(s.drained[name], got)
		del.Entries = append(del.Entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	res, err := s.sqs.DeleteMessageBatch(ctx, del)
	if err != nil {
		tb.Fatalf("fauxqs: DeleteMessageBatch %s: %v", name, err)
	}
	if len(res.Failed) > 0 {
		tb.Fatalf("fauxqs: DeleteMessageBatch %s: %d failed: %s", name, len(res.Failed), aws.ToString(res.Failed[0].Message))
	}
	return true
}

// inFlight returns how many messages of queue name are in flight
// (ApproximateNumberOfMessagesNotVisible).
func (s *Server) inFlight(tb testing.TB, name string) int {
	tb.Helper()
	return s.attributes(tb, name, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
}

// Count returns how many messages queue name holds, visible, in flight
// or delayed (GetQueueAttributes).
func (s *Server) Count(tb testing.TB, name string) int {
	tb.Helper()
	return s.attributes(tb, name, sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed)
}

// attributes returns the sum of the count attributes names of queue name.
func (s *Server) attributes(tb testing.TB, name string, names ...sqstypes.QueueAttributeName) int {
	tb.Helper()
	out, err := s.sqs.GetQueueAttributes(context.Background(), &sqsapi.GetQueueAttributesInput{QueueUrl: aws.String(s.QueueURL(name)), AttributeNames: names})
	if err != nil {
		tb.Fatalf("fauxqs: GetQueueAttributes %s: %v", name, err)
	}
	n := 0
	for _, v := range out.Attributes {
		c, _ := strconv.Atoi(v)
		n += c
	}
	return n
}
