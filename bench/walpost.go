package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/sns/snsfake"
)

// sinkPkgs maps the sink kinds the bench measures beyond discard and file
// to the package that registers each in the cdc binary.
var sinkPkgs = map[string]string{
	"kafka":    "/internal/publish/kafka",
	"nats":     "/internal/publish/natsjs",
	"rabbitmq": "/internal/publish/rabbitmq",
	"sqs":      "/internal/publish/sqs",
	"pubsub":   "/internal/publish/pubsub",
	"sns":      "/internal/publish/sns",
}

// sinkFanout3 is the sink "kind" of walpost_fanout3: three sinks at once
// (file, Kafka and discard) from one slot.
const sinkFanout3 = "fanout3"

// sinkKinds are the sink kinds a system's Sink stands for.
func sinkKinds(sink string) []string {
	if sink == sinkFanout3 {
		return []string{"file", "kafka", "discard"}
	}
	return []string{sink}
}

// buildCDC builds the cdc command (pkg, normally ./cmd/cdc) into dir and
// reports which of the sinks of sinkPkgs the binary has (it imports their
// packages).
func buildCDC(root, pkg, dir string) (bin string, sinks map[string]bool, err error) {
	bin = filepath.Join(dir, "cdc")
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	cmd = exec.Command("go", "list", "-deps", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return bin, nil, fmt.Errorf("go list -deps %s: %v", pkg, err)
	}
	sinks = map[string]bool{}
	for kind, p := range sinkPkgs {
		sinks[kind] = strings.Contains(string(out), p+"\n")
	}
	return bin, sinks, nil
}

// cdcProc is one `cdc run` subprocess.
type cdcProc struct {
	cmd  *exec.Cmd
	port int
	// sinks are the names of the run's sinks; the first one's latency
	// histogram is reported, and a message counts as published once every
	// sink published it.
	sinks   []string
	logPath string
	exited  chan struct{}
	waitErr error
}

// kafkaSinkExtra is added to the kafka sink's YAML mapping (the
// -kafka-sink-extra flag, e.g. "exactly_once: true"); "" adds nothing.
var kafkaSinkExtra string

// sinkYAML returns the sinks: entry for the system's sink kind.
func sinkYAML(kind, dir string, d sinkDest) (name, y string) {
	switch kind {
	case "file":
		return "file", fmt.Sprintf("  - {name: file, kind: file, path: %s}", filepath.Join(dir, "out.jsonl"))
	case "kafka":
		extra := ""
		if kafkaSinkExtra != "" {
			extra = ", " + kafkaSinkExtra
		}
		return "kafka", fmt.Sprintf("  - {name: kafka, kind: kafka, brokers: [%q], topic: %s%s}", d.KafkaAddr, kafkaTopic, extra)
	case "nats":
		return "nats", fmt.Sprintf("  - {name: nats, kind: nats, servers: [%q], subject: %q, stream: {name: %s}}", natsURL, d.NATSSubject, d.NATSStream)
	case "rabbitmq":
		return "rabbitmq", fmt.Sprintf("  - {name: rabbitmq, kind: rabbitmq, url: %q, exchange: %s}", rabbitURL, d.RabbitExchange)
	case "pubsub":
		return "pubsub", fmt.Sprintf("  - {name: pubsub, kind: pubsub, project: %s, topic: %s, emulator_host: %q}", pubsubProject, d.PubSubTopic, d.PubSubHost)
	case "sns":
		return "sns", fmt.Sprintf("  - {name: sns, kind: sns, topic_arn: %q, endpoint: %q}", d.SNSTopicARN, d.SNSEndpoint)
	case "sqs":
		return "sqs", fmt.Sprintf("  - {name: sqs, kind: sqs, queue: %s, region: us-east-1, endpoint: %q}", d.SQSQueue, d.SQSEndpoint)
	}
	return "discard", "  - {name: discard, kind: discard}"
}

// sinksYAML returns the names and the sinks: entries of every sink kind
// that sink (a system's Sink) stands for.
func sinksYAML(sink, dir string, d sinkDest) (names []string, y string) {
	var lines []string
	for _, k := range sinkKinds(sink) {
		name, line := sinkYAML(k, dir, d)
		names, lines = append(names, name), append(lines, line)
	}
	return names, strings.Join(lines, "\n")
}

// writeCDCConfig writes the run's config into dir and returns its path.
// receiveBuffer is postgres.receive_buffer ("": the relay's default).
func writeCDCConfig(dir, url string, n names, sinks string, port int, pprof bool, receiveBuffer string) (string, error) {
	rb := ""
	if receiveBuffer != "" {
		rb = "\n  receive_buffer: " + receiveBuffer
	}
	y := fmt.Sprintf(`postgres:
  url: %s
  table: %s
  publication: %s
  slot: %s%s
sinks:
%s
http: {listen: "127.0.0.1:%d", pprof: %t}
log: {level: info, format: json}
%s`, url, n.Qualified(), n.Publication, n.Slot, rb, sinks, port, pprof, tracingYAML)
	p := filepath.Join(dir, "cdc.yaml")
	return p, os.WriteFile(p, []byte(y), 0o644)
}

// cdcInit runs `cdc init`: table, publication, slot.
func cdcInit(bin, cfg string) error {
	out, err := exec.Command(bin, "init", "--config", cfg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cdc init: %v\n%s", err, out)
	}
	return nil
}

// startCDC starts `cdc run` with env (KEY=value) added to its
// environment; its log goes to dir/cdc.log.
func startCDC(bin, cfg, dir string, sinks []string, port int, env []string) (*cdcProc, error) {
	logPath := filepath.Join(dir, "cdc.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", cfg)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p := &cdcProc{cmd: cmd, port: port, sinks: sinks, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		lf.Close()
		close(p.exited)
	}()
	return p, nil
}

// alive returns an error once the process exited.
func (p *cdcProc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("cdc run exited: %v; log tail:\n%s", p.waitErr, p.logTail(1500))
	default:
		return nil
	}
}

// streamingInfo returns what the relay's first "streaming" log line says
// of its replication socket: the receive buffer it set (postgres.
// receive_buffer; 0 when the kernel's autotuning was kept) and the round
// trip it measured.
func (p *cdcProc) streamingInfo() string {
	b, _ := os.ReadFile(p.logPath)
	for _, l := range strings.Split(string(b), "\n") {
		var line struct {
			Message       string `json:"message"`
			ReceiveBuffer *int   `json:"receive_buffer"`
			RTT           *int   `json:"rtt_us"`
		}
		if json.Unmarshal([]byte(l), &line) != nil || line.Message != "streaming" || line.ReceiveBuffer == nil || line.RTT == nil {
			continue
		}
		return fmt.Sprintf("receive buffer %d bytes (0: the kernel's), round trip at connect %d µs", *line.ReceiveBuffer, *line.RTT)
	}
	return "no streaming line with receive_buffer in its log"
}

// switchedOff checks that the relay's log reports each low-level switch
// of env (KEY=off) as switched off (rawnet.Switch.Log), so that a
// mechanisms row never compares a run in which the switch was not seen.
func (p *cdcProc) switchedOff(env []string) error {
	b, _ := os.ReadFile(p.logPath)
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		if !loggedOff(string(b), key) {
			return fmt.Errorf("the relay's log does not report %s as switched off; log tail:\n%s", kv, p.logTail(1500))
		}
	}
	return nil
}

// loggedOff reports whether log (JSON lines) has the info line of the
// switch env turned off.
func loggedOff(log, env string) bool {
	for _, l := range strings.Split(log, "\n") {
		var line struct {
			Level string `json:"level"`
			Env   string `json:"env"`
			On    *bool  `json:"on"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && line.Level == "info" && line.Env == env && line.On != nil && !*line.On {
			return true
		}
	}
	return false
}

func (p *cdcProc) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

func (p *cdcProc) get(path string) (int, []byte, error) {
	resp, err := httpClient.Get(fmt.Sprintf("http://127.0.0.1:%d%s", p.port, path))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitReady polls /readyz until the relay streams.
func (p *cdcProc) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if code, _, err := p.get("/readyz"); err == nil && code == 200 {
			return nil
		}
		if err := p.alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cdc run not ready after %v; log tail:\n%s", timeout, p.logTail(1500))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cpuProfile fetches a CPU profile of the relay over the next d (the
// relay runs with http.pprof) and writes it to path. It returns at once;
// the returned function waits for the profile and reports its error.
func (p *cdcProc) cpuProfile(d time.Duration, path string) func() error {
	done := make(chan error, 1)
	go func() {
		c := &http.Client{Timeout: d + 30*time.Second}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", p.port, int(d.Seconds())))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("/debug/pprof/profile: status %d", resp.StatusCode)
			return
		}
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		done <- err
	}()
	return func() error { return <-done }
}

// scrape reads the first sink's end-to-end latency histogram and the
// messages every sink published (the smallest of their counts) from
// /metrics.
func (p *cdcProc) scrape() (*Hist, float64, error) {
	code, b, err := p.get("/metrics")
	if err != nil {
		return nil, 0, err
	}
	if code != 200 {
		return nil, 0, fmt.Errorf("/metrics: status %d", code)
	}
	h, err := ParsePromHistogram(bytes.NewReader(b), "walpost_end_to_end_latency_seconds", "sink", p.sinks[0])
	if err != nil {
		return nil, 0, err
	}
	if h == nil {
		h = NewHist()
	}
	var n float64
	for i, s := range p.sinks {
		v, _ := ParsePromValue(string(b), "walpost_messages_published_total", "sink", s)
		if i == 0 || v < n {
			n = v
		}
	}
	return h, n, nil
}

// stop reads the peak RSS, sends SIGTERM (the relay drains and exits 0)
// and returns the process's CPU seconds and peak RSS. A non-zero exit is
// an error.
func (p *cdcProc) stop() (cpu, rssMB float64, err error) {
	if e := p.alive(); e != nil {
		return 0, 0, e
	}
	rssMB, _ = peakRSSMB(p.cmd.Process.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return 0, rssMB, fmt.Errorf("cdc run did not stop within 60s of SIGTERM")
	}
	if ps := p.cmd.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if p.waitErr != nil {
		return cpu, rssMB, fmt.Errorf("cdc run exited after SIGTERM: %v; log tail:\n%s", p.waitErr, p.logTail(1500))
	}
	return cpu, rssMB, nil
}

// walpostRun sets up one walpost run: table, publication and slot through
// `cdc init`, with its own config and port.
type walpostRun struct {
	dir, cfg string
	port     int
	sink     string   // the system's Sink
	names    []string // its sinks' names in the config
	// stored counts the messages the run's stream or queue holds (NATS,
	// RabbitMQ; nil for the other sinks).
	stored func() (int64, error)
	close  func()   // stops what the run started besides the relay (its Kafka broker), deletes its stream or queue, removes its files
	env    []string // added to the relay's environment (low-level switches)
	// sinkEnv is added to the relay's environment for the sink (the AWS
	// credentials of an SQS run).
	sinkEnv []string
}

func (b *bench) prepareWalpost(ctx context.Context, kind string, n names) (*walpostRun, error) {
	dir, err := os.MkdirTemp(b.tmp, n.Table+"-")
	if err != nil {
		return nil, err
	}
	port, err := pgtest.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Every Kafka run gets a broker of its own: kfake lives in the bench
	// process and keeps every record it was sent, so a broker shared by
	// the runs of one invocation made each later run slower. NATS and
	// RabbitMQ runs get a stream, or an exchange and a queue, of their own
	// on the machine's servers.
	var dest sinkDest
	var stored func() (int64, error)
	var sinkEnv []string
	closeBroker := func() {}
	switch kind {
	case "sns":
		srv, name, err := startSNS()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("snsfake: %w", err)
		}
		dest.SNSEndpoint, dest.SNSTopicARN, closeBroker = srv.URL(), snsfake.ARN(name), srv.Stop
		stored = func() (int64, error) { return int64(srv.Count(name)), nil }
		sinkEnv = sqsEnv
	case "pubsub":
		srv, topic, err := startPubSub()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pstest: %w", err)
		}
		dest.PubSubHost, dest.PubSubTopic, closeBroker = srv.Addr, topic, func() { srv.Close() }
		stored = func() (int64, error) { return int64(len(srv.Messages())), nil }
	case "sqs":
		srv, q, err := startSQS()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("sqsfake: %w", err)
		}
		dest.SQSEndpoint, dest.SQSQueue, closeBroker = srv.URL(), q, srv.Close
		stored = func() (int64, error) { return int64(srv.Count(q)), nil }
		sinkEnv = sqsEnv
	case "kafka", sinkFanout3:
		c, addr, err := startKafka(dir, b.kafkaMem)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("kfake: %w", err)
		}
		dest.KafkaAddr, closeBroker = addr, c.Close
	case "nats", "rabbitmq":
		setup := natsStream
		if kind == "rabbitmq" {
			setup = rabbitTopology
		}
		t, err := setup()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		dest, stored = t.dest, t.stored
		closeBroker = func() {
			if err := t.remove(); err != nil {
				b.logf("  %s: %v", kind, err)
			}
		}
	}
	sinkNames, y := sinksYAML(kind, dir, dest)
	cfg, err := writeCDCConfig(dir, b.url, n, y, port, b.pprofDir != "", b.receiveBuffer)
	if err == nil {
		err = cdcInit(b.cdc, cfg)
	}
	if err != nil {
		closeBroker()
		os.RemoveAll(dir)
		return nil, err
	}
	// The run's files (sink output, Kafka log) go with it: left behind,
	// their writeback would slow later runs' fsyncs.
	closeAll := func() { closeBroker(); os.RemoveAll(dir) }
	return &walpostRun{dir: dir, cfg: cfg, port: port, sink: kind, names: sinkNames, stored: stored, close: closeAll, sinkEnv: sinkEnv}, nil
}

func (b *bench) startWalpost(w *walpostRun) (*cdcProc, error) {
	return startCDC(b.cdc, w.cfg, w.dir, w.names, w.port, append(slices.Clip(w.env), w.sinkEnv...))
}
