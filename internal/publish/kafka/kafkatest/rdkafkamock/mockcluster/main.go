//go:build walpost_rdkafka && cgo

// Command mockcluster runs librdkafka's mock Kafka cluster (rdkafka_mock.h,
// from Debian's librdkafka-dev) for walpost's tests: a second Kafka
// implementation beside franz-go's kfake, written by other authors, with
// real TCP listeners, several brokers, idempotent and transactional
// producers and error injection per request type. It is built only by the
// tests (package rdkafkamock, with -tags walpost_rdkafka) and never linked
// into cdc.
//
// It prints "bootstrap HOST:PORT,…" on standard output once the cluster
// listens, then takes one command a line on standard input and answers
// each with "ok" or "error: …":
//
//	topic NAME PARTITIONS          create a topic (replication factor 1)
//	down BROKER | up BROKER        take a broker off the network, bring it back
//	errors APIKEY CODE [CODE …]    the next requests of APIKEY fail with CODEs, in turn
//	rtt BROKER MS                  delay every response of BROKER by MS
//
// It exits, destroying the cluster, when standard input ends.
package main

/*
#cgo LDFLAGS: -lrdkafka
#include <stdlib.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static rd_kafka_t *new_handle(char *errstr, size_t len) {
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "log_level", "3", errstr, len); // no notice about bootstrap.servers
	// The handle only keeps the cluster's books; it sends nothing.
	return rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len);
}

static void push_errors(rd_kafka_mock_cluster_t *mc, int16_t key, size_t cnt, rd_kafka_resp_err_t *errs) {
	rd_kafka_mock_push_request_errors_array(mc, key, cnt, errs);
}
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

func main() {
	brokers := 3
	if len(os.Args) > 1 {
		n, err := strconv.Atoi(os.Args[1])
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "usage: mockcluster [BROKERS]")
			os.Exit(2)
		}
		brokers = n
	}
	errstr := make([]byte, 512)
	rk := C.new_handle((*C.char)(unsafe.Pointer(&errstr[0])), C.size_t(len(errstr)))
	if rk == nil {
		fmt.Fprintf(os.Stderr, "mockcluster: rd_kafka_new: %s\n", C.GoString((*C.char)(unsafe.Pointer(&errstr[0]))))
		os.Exit(1)
	}
	mc := C.rd_kafka_mock_cluster_new(rk, C.int(brokers))
	if mc == nil {
		fmt.Fprintln(os.Stderr, "mockcluster: rd_kafka_mock_cluster_new failed")
		os.Exit(1)
	}
	fmt.Printf("bootstrap %s\n", C.GoString(C.rd_kafka_mock_cluster_bootstraps(mc)))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if err := command(mc, strings.Fields(in.Text())); err != nil {
			fmt.Printf("error: %v\n", err)
		} else {
			fmt.Println("ok")
		}
	}
	C.rd_kafka_mock_cluster_destroy(mc)
	C.rd_kafka_destroy(rk)
}

func command(mc *C.rd_kafka_mock_cluster_t, f []string) error {
	if len(f) == 0 {
		return fmt.Errorf("empty command")
	}
	ints := func(ss []string) ([]int, error) {
		out := make([]int, len(ss))
		for i, s := range ss {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("%q: not a number", s)
			}
			out[i] = n
		}
		return out, nil
	}
	resp := func(e C.rd_kafka_resp_err_t) error {
		if e != 0 {
			return fmt.Errorf("%s", C.GoString(C.rd_kafka_err2str(e)))
		}
		return nil
	}
	switch {
	case f[0] == "topic" && len(f) == 3:
		n, err := ints(f[2:])
		if err != nil {
			return err
		}
		name := C.CString(f[1])
		defer C.free(unsafe.Pointer(name))
		return resp(C.rd_kafka_mock_topic_create(mc, name, C.int(n[0]), 1))
	case (f[0] == "down" || f[0] == "up") && len(f) == 2:
		n, err := ints(f[1:])
		if err != nil {
			return err
		}
		if f[0] == "down" {
			return resp(C.rd_kafka_mock_broker_set_down(mc, C.int32_t(n[0])))
		}
		return resp(C.rd_kafka_mock_broker_set_up(mc, C.int32_t(n[0])))
	case f[0] == "rtt" && len(f) == 3:
		n, err := ints(f[1:])
		if err != nil {
			return err
		}
		return resp(C.rd_kafka_mock_broker_set_rtt(mc, C.int32_t(n[0]), C.int(n[1])))
	case f[0] == "errors" && len(f) >= 3:
		n, err := ints(f[1:])
		if err != nil {
			return err
		}
		codes := make([]C.rd_kafka_resp_err_t, len(n)-1)
		for i, c := range n[1:] {
			codes[i] = C.rd_kafka_resp_err_t(c)
		}
		C.push_errors(mc, C.int16_t(n[0]), C.size_t(len(codes)), &codes[0])
		return nil
	}
	return fmt.Errorf("unknown command %q", strings.Join(f, " "))
}
