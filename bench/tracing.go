package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
)

// tracingRatio is the -tracing flag: "" or "off" runs walpost without
// tracing (the bar), a ratio from 0 to 1 with tracing: on, exporting its
// publish spans over OTLP/HTTP to otlpSink, a receiver that accepts and
// discards them (the cost measured is walpost's: recording, queueing,
// encoding and sending the spans).
var tracingRatio string

// tracingYAML is the tracing: block of walpost's runs ("" when off); set
// by startTracingSink.
var tracingYAML string

// startTracingSink checks -tracing and, with a ratio, starts the OTLP
// receiver walpost's runs export to.
func startTracingSink() (stop func(), err error) {
	if tracingRatio == "" || tracingRatio == "off" {
		return func() {}, nil
	}
	r, err := strconv.ParseFloat(tracingRatio, 64)
	if err != nil || r < 0 || r > 1 {
		return nil, fmt.Errorf("-tracing %q: want off or a ratio from 0 to 1 (1: every message's span, 0.01: one in a hundred)", tracingRatio)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
	})}
	go srv.Serve(l)
	tracingYAML = fmt.Sprintf("tracing: {enabled: true, protocol: http/protobuf, endpoint: 'http://%s', sampler: parentbased_traceidratio, sample_ratio: %v}\n", l.Addr(), r)
	return func() { srv.Close() }, nil
}
