//go:build !walpost_no_aws

package claimcheck

import (
	"bytes"
	"context"
	"fmt"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/walpost/walpost/internal/config"
)

// s3Store keeps payloads as objects of one bucket.
type s3Store struct {
	client *s3.Client
	bucket string
}

// s3StoreOf is the S3 store of cc (newS3), as a Store.
func s3StoreOf(cc *config.ClaimCheck) (Store, error) {
	s, err := newS3(cc)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// newS3 builds the store's client from the AWS default chain (no I/O:
// credentials are resolved at the first request).
func newS3(cc *config.ClaimCheck) (*s3Store, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if cc.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cc.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: loading the AWS configuration: %w", cc.Field, err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cc.Endpoint != "" {
			o.BaseEndpoint = aws.String(cc.Endpoint)
		}
		o.UsePathStyle = cc.PathStyle
		// A checksum only where S3 requires one: the SDK's default
		// (a trailing CRC in aws-chunked encoding) is not understood by
		// every S3-compatible store.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &s3Store{client: client, bucket: cc.Bucket}, nil
}

// Put uploads body in one PutObject request, which replaces the object
// whole or not at all.
func (s *s3Store) Put(ctx context.Context, name string, body []byte, contentType string) (string, error) {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(name),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String(contentType),
	})
	if err != nil {
		return "", err
	}
	return "s3://" + s.bucket + "/" + (&url.URL{Path: name}).EscapedPath(), nil
}
