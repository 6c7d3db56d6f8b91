package oplog

import (
	"errors"
	"strings"
)

// Refusal maps a fragment of a failed command's stderr, as upstream words
// it, to the sentinel error it means.
type Refusal struct {
	Fragment string
	Err      error
}

// Refused returns the sentinel of the first refusal whose fragment is in
// the stderr of the *Error in err, or nil.
func Refused(err error, refusals []Refusal) error {
	var oe *Error
	if !errors.As(err, &oe) {
		return nil
	}
	for _, r := range refusals {
		if strings.Contains(oe.Stderr, r.Fragment) {
			return r.Err
		}
	}
	return nil
}

// Marked returns err, which already says in words what sentinel means (the
// stderr in it), matching sentinel for errors.Is without repeating it.
func Marked(sentinel, err error) error { return marked{sentinel, err} }

type marked struct{ sentinel, err error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.sentinel, m.err} }
