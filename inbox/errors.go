package inbox

import "errors"

var (
	// ErrInvalidTable means Options.Table has an empty part or more than
	// two dot-separated parts.
	ErrInvalidTable = errors.New("inbox: invalid table name")
	// ErrInvalidOptions means an Options field is out of range.
	ErrInvalidOptions = errors.New("inbox: invalid options")
	// ErrEmptyID means Process was called with an empty message id.
	ErrEmptyID = errors.New("inbox: empty message id")
)
