package fleet

// The tests configure the file, stdout and discard sinks, which cmd/cdc
// registers by importing their package.
import _ "github.com/walpost/walpost/internal/publish/file"
