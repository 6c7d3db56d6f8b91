package graph

import (
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

// ErrWrongStream: a staged release is on another stream than the one the
// graph was asked for.
var ErrWrongStream = errors.New("the staged release is on another update stream")

// WrongStreamError is the staging's answer for a release that turned out
// to be on another stream: like a pulled one (engine.PulledRelease), it is
// set aside and its staged deployment discarded, no failure counted, as
// zincati scrubs and denylists it (confirm_valid_stream,
// src/update_agent/actor.rs).
type WrongStreamError struct {
	Checksum, Version string
	Want, Got         string
}

func (e *WrongStreamError) Error() string {
	return fmt.Sprintf("release %s (%s) was staged from stream %q, not %q, the stream followed", e.Version, e.Checksum, e.Got, e.Want)
}

func (e *WrongStreamError) Is(target error) bool { return target == ErrWrongStream }

// PulledChecksum is engine.PulledRelease's.
func (e *WrongStreamError) PulledChecksum() string { return e.Checksum }

// ConfirmStream checks that the staged deployment s is on stream want, as
// zincati's is_pending_deployment_on_correct_stream reads it from the
// staged deployment's base commit (Stream). nil when it is, when want is
// "" (not chosen from a graph), or when s names no stream: zincati retries
// then, but a commit without the key (a plain ostree repository behind a
// graph) would never stage, and the graph chose the release for want.
func ConfirmStream(s rpmostree.Deployment, want string) *WrongStreamError {
	got, ok := Stream(s.BaseCommitMeta)
	if want == "" || !ok || got == want {
		return nil
	}
	return &WrongStreamError{Checksum: s.Target(), Version: s.Version, Want: want, Got: got}
}
