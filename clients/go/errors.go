// The client's errors: sentinel values for errors.Is, the gateway's problem
// documents as *Problem, and *LostError for a lock that is gone.

package lockgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors, for errors.Is. The errors this package returns wrap or
// match one of them: a *Problem matches the sentinel of its slug, a
// *LostError matches ErrLockLost, and a gateway that cannot be reached is
// ErrUnavailable.
var (
	// ErrLockHeld: another owner holds the lock and the wait (if any) ran
	// out (`lock-held`). The *Problem's RetryAfter says how long the
	// holder's lease has left.
	ErrLockHeld = errors.New("lockgate: lock is held")
	// ErrNotOwner: the token does not hold the lock (`not-owner`).
	ErrNotOwner = errors.New("lockgate: not the lock's owner")
	// ErrLockLost: the lock is no longer held by this owner: its lease
	// ended, it was deleted, revoked or released with its token by someone
	// else, or the connection that held it broke (`lock-not-found` on a
	// lock one held is the same news).
	ErrLockLost = errors.New("lockgate: lock lost")
	// ErrDeadlock: the wait would close a cycle of waits between sessions
	// (`deadlock`); the error is a *DeadlockError whose Cycle names the
	// keys.
	ErrDeadlock = errors.New("lockgate: deadlock")
	// ErrSessionNotFound: the session ended or never was
	// (`session-not-found`). A *SessionLostError, the end of a session
	// opened here, matches it too.
	ErrSessionNotFound = errors.New("lockgate: session not found")
	// ErrUnavailable: the gateway could not be reached, did not answer in
	// time, or answered that it (or Redis behind it) cannot serve now
	// (`backend-unavailable`, `shutting-down`, `too-many-waiters`, any 5xx).
	// Nothing was granted; retrying later may succeed.
	ErrUnavailable = errors.New("lockgate: gateway unavailable")
	// ErrInvalidRequest: the gateway refused the request as asked (an
	// invalid key or field, a limit or mode that does not match the lock,
	// missing credentials, ...). Retrying unchanged fails the same way.
	ErrInvalidRequest = errors.New("lockgate: invalid request")
	// ErrReleased is what Lock.Err returns, and the cause of Lock.Context,
	// once Release (or its session's Close) gave the lock back.
	ErrReleased = errors.New("lockgate: lock released")
	// ErrSessionClosed is what Session.Err returns, and the cause of
	// Session.Context, once Close ended the session.
	ErrSessionClosed = errors.New("lockgate: session closed")
)

// Problem is an RFC 9457 problem document the gateway answered with
// (`application/problem+json`). errors.Is matches it against the sentinel
// errors by its slug: errors.Is(err, ErrLockHeld) for `lock-held`.
type Problem struct {
	// Type is `/problems/<slug>`.
	Type string
	// Title is fixed per slug.
	Title string
	// Status is the HTTP status code.
	Status int
	// Detail explains this occurrence.
	Detail string
	// Key is the lock key the problem concerns, when there is one.
	Key string
	// RetryAfter is `retry_after_ms` (for `lock-held`: the holder's
	// remaining lease), or else the `Retry-After` header; 0 when neither.
	RetryAfter time.Duration
	// Extra holds every other member (`field`, `minimum`, `maximum`,
	// `cycle`, ...) as raw JSON, numbers exact.
	Extra map[string]json.RawMessage
}

// Slug is the stable name of the problem: `lock-held` for
// `/problems/lock-held`; empty for a document that is not the gateway's.
func (p *Problem) Slug() string {
	if !strings.HasPrefix(p.Type, "/problems/") {
		return ""
	}
	return strings.TrimPrefix(p.Type, "/problems/")
}

func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString("lockgate: ")
	b.WriteString(p.Title)
	if p.Detail != "" {
		b.WriteString(": ")
		b.WriteString(p.Detail)
	}
	b.WriteString(" (")
	if slug := p.Slug(); slug != "" {
		b.WriteString(slug)
		b.WriteString(", ")
	}
	b.WriteString(strconv.Itoa(p.Status))
	b.WriteString(")")
	return b.String()
}

// Is maps the problem's slug (or, for a document that is not the
// gateway's, its status) to the sentinel errors.
func (p *Problem) Is(target error) bool {
	return target != nil && target == p.sentinel()
}

// Member decodes the extra member `name` (such as `field` or `maximum`)
// into v; false when the problem has no such member or it does not fit v.
func (p *Problem) Member(name string, v any) bool {
	raw, ok := p.Extra[name]
	return ok && json.Unmarshal(raw, v) == nil
}

// sentinelBySlug maps the slugs whose meaning the status alone does not
// give (a 409 is `lock-held`, `not-owner` or `deadlock`); any other 5xx or
// 429 is ErrUnavailable, any other 4xx ErrInvalidRequest.
var sentinelBySlug = map[string]error{
	"lock-held":           ErrLockHeld,
	"not-owner":           ErrNotOwner,
	"lock-not-found":      ErrLockLost,
	"deadlock":            ErrDeadlock,
	"session-not-found":   ErrSessionNotFound,
	"request-timeout":     ErrUnavailable,
	"too-many-waiters":    ErrUnavailable,
	"shutting-down":       ErrUnavailable,
	"backend-unavailable": ErrUnavailable,
	"not-replicated":      ErrUnavailable,
	"internal":            ErrUnavailable,
}

func (p *Problem) sentinel() error {
	if err, ok := sentinelBySlug[p.Slug()]; ok {
		return err
	}
	switch {
	case p.Status >= 500 || p.Status == http.StatusTooManyRequests:
		return ErrUnavailable
	case p.Status >= 400:
		return ErrInvalidRequest
	}
	return nil
}

// DeadlockError is the refusal of a wait that would close a cycle of
// session waits (`409 deadlock`): each session of the cycle holds a lock
// the next one waits for. It matches ErrDeadlock, and errors.As finds its
// *Problem too. Release what the session holds, or take the locks in one
// order.
type DeadlockError struct {
	*Problem
	// Cycle is the keys of the cycle, in order, starting with the one this
	// wait was for.
	Cycle []string
}

// Unwrap returns the problem document.
func (e *DeadlockError) Unwrap() error { return e.Problem }

// parseRefusal reads a refusal as an error: a *DeadlockError for
// `deadlock`, the *Problem otherwise.
func parseRefusal(status int, header http.Header, body []byte) error {
	p := parseProblem(status, header, body)
	if p.Slug() == "deadlock" {
		e := &DeadlockError{Problem: p}
		p.Member("cycle", &e.Cycle)
		return e
	}
	return p
}

// parseProblem reads a refusal: the problem document in body, or one made
// from the status when the body is not one (a proxy's error page, say).
func parseProblem(status int, header http.Header, body []byte) *Problem {
	p := &Problem{Status: status}
	var members map[string]json.RawMessage
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.UseNumber()
	if decoder.Decode(&members) != nil || members == nil {
		p.Type = "about:blank"
		p.Title = http.StatusText(status)
		if p.Title == "" {
			p.Title = "HTTP " + strconv.Itoa(status)
		}
		p.Detail = strings.TrimSpace(string(body[:minOf(len(body), 200)]))
		p.RetryAfter = retryAfterHeader(header)
		return p
	}
	take := func(name string, into any) {
		if raw, ok := members[name]; ok {
			_ = json.Unmarshal(raw, into)
			delete(members, name)
		}
	}
	var retryAfterMs int64
	take("type", &p.Type)
	take("title", &p.Title)
	take("status", &p.Status)
	take("detail", &p.Detail)
	take("key", &p.Key)
	take("retry_after_ms", &retryAfterMs)
	if p.Status == 0 {
		p.Status = status
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	p.RetryAfter = time.Duration(retryAfterMs) * time.Millisecond
	if p.RetryAfter == 0 {
		p.RetryAfter = retryAfterHeader(header)
	}
	if len(members) > 0 {
		p.Extra = members
	}
	return p
}

// retryAfterHeader is `Retry-After` (whole seconds, as the gateway sends it).
func retryAfterHeader(header http.Header) time.Duration {
	seconds, err := strconv.Atoi(strings.TrimSpace(header.Get("Retry-After")))
	if err != nil || seconds < 0 {
		return 0
	}
	return time.Duration(seconds) * time.Second
}

// Reasons a lock is lost: LostError.Reason. The first five are the
// gateway's own (a streamed lock's `lost` event); the rest the client's.
const (
	// ReasonLockGone: a renewal found no lock (its lease ran out, or its
	// key was deleted in Redis).
	ReasonLockGone = "lock-gone"
	// ReasonHeldByAnother: another owner holds it now.
	ReasonHeldByAnother = "held-by-another"
	// ReasonBackendUnavailable: no renewal reached Redis before the lease
	// would end.
	ReasonBackendUnavailable = "backend-unavailable"
	// ReasonRevoked: an operator revoked it.
	ReasonRevoked = "revoked"
	// ReasonShuttingDown: the gateway released it as it shut down.
	ReasonShuttingDown = "shutting-down"
	// ReasonReleasedElsewhere: someone released it with its token.
	ReasonReleasedElsewhere = "released-elsewhere"
	// ReasonConnectionLost: the stream to the gateway broke (the gateway
	// is gone, or the network between), so nothing renews the lease.
	ReasonConnectionLost = "connection-lost"
	// ReasonLeaseExpired: no renewal (or, for a lease, no Extend) came
	// before the lease could have ended, by this process's clock.
	ReasonLeaseExpired = "lease-expired"
	// ReasonSessionEnded: the session the lock hung on ended (its
	// LostError unwraps to the *SessionLostError of a session opened here).
	ReasonSessionEnded = "session-ended"
)

// Reasons a session ends other than Close: SessionLostError.Reason. The
// gateway's (a streamed session's `ended` event) are ReasonSessionExpired,
// ReasonSessionDeleted and ReasonShuttingDown; the client's
// ReasonConnectionLost and ReasonLeaseExpired.
const (
	// ReasonSessionExpired: nobody kept the session alive before its lease
	// ran out (a gateway or Redis that stalled).
	ReasonSessionExpired = "expired"
	// ReasonSessionDeleted: someone ended it with its id (`DELETE
	// /sessions/{id}`).
	ReasonSessionDeleted = "deleted"
)

// LostError says why a lock was lost. errors.Is(err, ErrLockLost) holds for
// it; Unwrap gives what broke, when something did (a connection error, the
// gateway's `lock-not-found` answer).
type LostError struct {
	// Key is the lock's key. For a LockSet, the key of the lock whose loss
	// lost the set, as the gateway named it; when no one lock was lost (a
	// broken stream, no renewal in time, the gateway shutting down, the
	// end of a session opened here), the set as its String shows it.
	Key string
	// Reason is one of the Reason constants (or a reason a newer gateway
	// sends).
	Reason string
	// Err is the underlying error, if any.
	Err error
}

func (e *LostError) Error() string {
	text := fmt.Sprintf("lockgate: lost the lock %s: %s", e.Key, describeReason(e.Reason))
	if e.Err != nil {
		text += ": " + e.Err.Error()
	}
	return text
}

// Is reports whether target is ErrLockLost.
func (e *LostError) Is(target error) bool { return target == ErrLockLost }

// Unwrap returns the underlying error.
func (e *LostError) Unwrap() error { return e.Err }

// SessionLostError says why a session opened here ended without Close. It
// matches ErrSessionNotFound (the session is gone); Unwrap gives what
// broke, when something did.
type SessionLostError struct {
	// Reason is ReasonSessionExpired, ReasonSessionDeleted,
	// ReasonShuttingDown, ReasonConnectionLost or ReasonLeaseExpired (or a
	// reason a newer gateway sends, or `session-not-found` when Close
	// found it already gone).
	Reason string
	// Err is the underlying error, if any.
	Err error
}

func (e *SessionLostError) Error() string {
	text := "lockgate: lost the session: " + describeSessionReason(e.Reason)
	if e.Err != nil {
		text += ": " + e.Err.Error()
	}
	return text
}

// Is reports whether target is ErrSessionNotFound.
func (e *SessionLostError) Is(target error) bool { return target == ErrSessionNotFound }

// Unwrap returns the underlying error.
func (e *SessionLostError) Unwrap() error { return e.Err }

func describeSessionReason(reason string) string {
	switch reason {
	case ReasonSessionExpired:
		return "nobody kept it alive before its lease ran out"
	case ReasonSessionDeleted:
		return "it was ended with its id by someone else"
	case ReasonShuttingDown:
		return "the gateway ended it as it shut down"
	case ReasonConnectionLost:
		return "the stream to the gateway broke, so nothing keeps it alive"
	case ReasonLeaseExpired:
		return "no keepalive came before its lease could have ended"
	}
	return reason
}

func describeReason(reason string) string {
	switch reason {
	case ReasonSessionEnded:
		return "the session it hung on ended"
	case ReasonLockGone:
		return "a renewal found no lock (its lease ran out, or it was deleted)"
	case ReasonHeldByAnother:
		return "another owner holds it"
	case ReasonBackendUnavailable:
		return "no renewal reached Redis before the lease would end"
	case ReasonRevoked:
		return "an operator revoked it"
	case ReasonShuttingDown:
		return "the gateway released it as it shut down"
	case ReasonReleasedElsewhere:
		return "it was released with its token by someone else"
	case ReasonConnectionLost:
		return "the stream to the gateway broke, so nothing renews the lease"
	case ReasonLeaseExpired:
		return "no renewal came before the lease could have ended"
	}
	return reason
}

// unavailableError is a failure without a problem document: the gateway
// could not be reached, or did not answer in time. It matches
// ErrUnavailable and unwraps to the transport's error.
type unavailableError struct {
	message string
	err     error
}

func (e *unavailableError) Error() string {
	if e.err == nil {
		return "lockgate: " + e.message
	}
	return "lockgate: " + e.message + ": " + e.err.Error()
}

func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

func (e *unavailableError) Unwrap() error { return e.err }

func minOf[T int | int64 | time.Duration](a, b T) T {
	if a < b {
		return a
	}
	return b
}
