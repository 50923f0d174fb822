package file_test

import (
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/walpost/walpost/internal/publish/file"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkFilePublish measures the file sink (fsync on, as configured
// by default) and the JSON lines alone (a writer sink to io.Discard).
func BenchmarkFilePublish(b *testing.B) {
	for _, batch := range []int{1, 1000} {
		b.Run(fmt.Sprintf("file/batch=%d", batch), func(b *testing.B) {
			s, err := file.Open("f", filepath.Join(b.TempDir(), "out.jsonl"), true)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			sinktest.BenchPublish(b, s, batch)
		})
		b.Run(fmt.Sprintf("lines/batch=%d", batch), func(b *testing.B) {
			sinktest.BenchPublish(b, file.NewWriterSink("w", io.Discard), batch)
		})
	}
}
