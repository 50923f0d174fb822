package claimcheck

import (
	"context"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/walpost/walpost/internal/config"
)

// azblobStore keeps payloads as block blobs of one container.
type azblobStore struct {
	client    *azblob.Client
	container string
}

// newAzblob builds the store's client (no I/O). Errors never quote the
// connection string.
func newAzblob(cc *config.ClaimCheck) (*azblobStore, error) {
	var client *azblob.Client
	var err error
	if cc.ConnectionString != "" {
		client, err = azblob.NewClientFromConnectionString(cc.ConnectionString, nil)
		if err != nil {
			return nil, fmt.Errorf("%s.connection_string: not a usable storage connection string (copy it from the storage account's Access keys)", cc.Field)
		}
	} else {
		cred, cerr := azidentity.NewDefaultAzureCredential(nil)
		if cerr != nil {
			return nil, fmt.Errorf("%s.account_url: Azure AD credential: %w", cc.Field, cerr)
		}
		if client, err = azblob.NewClient(cc.AccountURL, cred, nil); err != nil {
			return nil, fmt.Errorf("%s.account_url: %w", cc.Field, err)
		}
	}
	return &azblobStore{client: client, container: cc.Container}, nil
}

// Put uploads body in one Put Blob request (UploadBuffer does so up to
// 256 MiB), which replaces the blob whole or not at all.
func (a *azblobStore) Put(ctx context.Context, name string, body []byte, contentType string) (string, error) {
	_, err := a.client.UploadBuffer(ctx, a.container, name, body, &azblob.UploadBufferOptions{
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &contentType},
	})
	if err != nil {
		return "", err
	}
	return a.client.ServiceClient().NewContainerClient(a.container).NewBlobClient(name).URL(), nil
}
