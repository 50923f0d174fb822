package replay

// The tests configure the file sink, which cmd/cdc registers by importing
// its package.
import _ "github.com/walpost/walpost/internal/publish/file"
