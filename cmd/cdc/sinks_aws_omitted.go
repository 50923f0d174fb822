//go:build walpost_no_aws

package main

func init() { omitted("walpost_no_aws", "sns", "sqs") }
