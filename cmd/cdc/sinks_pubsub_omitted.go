//go:build walpost_no_pubsub

package main

func init() { omitted("walpost_no_pubsub", "pubsub") }
