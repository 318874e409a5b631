package health

import "errors"

// ErrUnknownState is returned by ParseState for a name that is not a state.
var ErrUnknownState = errors.New("unknown health state")

// ErrUnknownInput is returned by ParseInput for a name that is not an input.
var ErrUnknownInput = errors.New("unknown health input")
