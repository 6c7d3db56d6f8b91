package fleetlock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"unicode"
)

// Endpoints, relative to the base URL.
const (
	PathPreReboot   = "/v1/pre-reboot"
	PathSteadyState = "/v1/steady-state"
)

// Kind is the "kind" of an error answer, also the metrics label: a small
// fixed set, as the protocol asks (zincati uses it as a label too).
type Kind string

const (
	KindOK                    Kind = "ok" // metrics only: a 200 answer
	KindNotFound              Kind = "not_found"
	KindMethodNotAllowed      Kind = "method_not_allowed"
	KindMissingHeader         Kind = "missing_header"
	KindInvalidRequest        Kind = "invalid_request"
	KindInvalidClientIdentity Kind = "invalid_client_identity"
	KindInvalidGroup          Kind = "invalid_group"
	KindUnknownGroup          Kind = "unknown_group"
	KindSemaphoreFull         Kind = "failed_lock_semaphore_full"
	// KindMinInterval: the client's turn came, but the group's previous
	// reboot released its slot less than lock.min_interval ago.
	KindMinInterval  Kind = "failed_lock_min_interval"
	KindFailedLock   Kind = "failed_lock"
	KindFailedUnlock Kind = "failed_unlock"
	// KindNotOwner: the client's entry was made from another address (or
	// certificate); only its own client may release it or ask for it.
	KindNotOwner Kind = "client_not_owner"
	// KindNotAllowed: fleetlock.allow_ids / allow_networks refuse the
	// client.
	KindNotAllowed Kind = "client_not_allowed"
	// KindEtcdMember: the client is an etcd member, which must reboot
	// through an agent (member slot, quorum guard).
	KindEtcdMember Kind = "client_is_etcd_member"
	// KindQueueFull: fleetlock.max_waiters clients already wait in the
	// group; a new client is not queued.
	KindQueueFull Kind = "failed_lock_queue_full"
	// KindRateLimited: the client's address sent more requests than
	// Options.Rate lets through; nothing was read from etcd.
	KindRateLimited Kind = "too_many_requests"
	// KindMemberUnsafe: this host's own zincati, an etcd member's
	// (Options.LocalMember), holds its slots but the member may not go
	// down now (quorum, another member's health, no leader), or may not
	// queue yet (followers first), or is not healthy again after its
	// reboot (steady-state).
	KindMemberUnsafe Kind = "failed_lock_member_unsafe"
)

// Kinds lists every kind, for metrics.
var Kinds = []Kind{KindOK, KindNotFound, KindMethodNotAllowed, KindMissingHeader, KindInvalidRequest,
	KindInvalidClientIdentity, KindInvalidGroup, KindUnknownGroup, KindSemaphoreFull, KindMinInterval, KindFailedLock, KindFailedUnlock,
	KindNotOwner, KindNotAllowed, KindEtcdMember, KindQueueFull, KindRateLimited, KindMemberUnsafe}

// Status is the HTTP status of an answer of kind k.
func (k Kind) Status() int {
	switch k {
	case KindOK:
		return http.StatusOK
	case KindNotFound, KindUnknownGroup:
		return http.StatusNotFound
	case KindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case KindSemaphoreFull, KindMinInterval, KindMemberUnsafe:
		return http.StatusConflict
	case KindFailedLock, KindFailedUnlock:
		return http.StatusServiceUnavailable
	case KindNotOwner, KindNotAllowed, KindEtcdMember:
		return http.StatusForbidden
	case KindQueueFull, KindRateLimited:
		return http.StatusTooManyRequests
	}
	return http.StatusBadRequest
}

// Error is the protocol's error body.
type Error struct {
	Kind  Kind   `json:"kind"`
	Value string `json:"value"`
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Value }

func errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Value: fmt.Sprintf(format, args...)}
}

// Params are a request's client_params.
type Params struct {
	ID    string `json:"id"`
	Group string `json:"group"`
}

type body struct {
	ClientParams *Params `json:"client_params"`
}

var groupRe = regexp.MustCompile(`^[a-zA-Z0-9.-]+$`)

// maxIDLen bounds a client ID (zincati's are 32 hex digits); it becomes
// part of an etcd key.
const maxIDLen = 253

// HeaderName must be "true" on every request: the request was meant for a
// FleetLock server, not redirected to it.
const HeaderName = "fleet-lock-protocol"

// Parse checks one request: method, header and body against the protocol,
// and the group against served. It is the whole validation, without I/O.
func Parse(method, header string, raw []byte, served func(group string) bool) (Params, *Error) {
	if method != http.MethodPost {
		return Params{}, errorf(KindMethodNotAllowed, "method %s not allowed, use POST", method)
	}
	if header != "true" {
		return Params{}, errorf(KindMissingHeader, "header %q must be \"true\", got %q", HeaderName, header)
	}
	var b body
	if err := json.Unmarshal(raw, &b); err != nil {
		return Params{}, errorf(KindInvalidRequest, "body is not valid JSON: %v", err)
	}
	if b.ClientParams == nil {
		return Params{}, errorf(KindInvalidRequest, "body has no client_params object")
	}
	p := *b.ClientParams
	if err := CheckID(p.ID); err != nil {
		return Params{}, errorf(KindInvalidClientIdentity, "client id %q: %s", p.ID, err)
	}
	if !groupRe.MatchString(p.Group) {
		return Params{}, errorf(KindInvalidGroup, "group %q must match %s", p.Group, groupRe)
	}
	if !served(p.Group) {
		return Params{}, errorf(KindUnknownGroup, "group %q is not served here", p.Group)
	}
	return p, nil
}

// CheckID says why id cannot be a client ID (nil when it can): it becomes
// part of an etcd key, and `update-agent lock release` takes it back.
func CheckID(id string) error {
	if id == "" {
		return fmt.Errorf("must be non-empty")
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("longer than %d bytes", maxIDLen)
	}
	for _, r := range id {
		if r == '/' || r > unicode.MaxASCII || !unicode.IsGraphic(r) || unicode.IsSpace(r) {
			return fmt.Errorf("must be printable ASCII without spaces or '/'")
		}
	}
	return nil
}
