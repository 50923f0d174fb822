package fleet

// The tests configure the file, stdout and discard sinks, and the
// Kubernetes example's kafka, which cmd/cdc registers by importing their
// packages (config.Parse checks each sink's kind and settings).
import (
	_ "github.com/walpost/walpost/internal/publish/file"
	_ "github.com/walpost/walpost/internal/publish/kafka"
)
