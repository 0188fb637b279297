// The functional options of an acquisition (LockOption) and of a watch
// (WatchOption).

package lockgate

import (
	"fmt"
	"time"
)

// LockOption configures Lock, TryLock, Lease and Campaign, and (SessionTTL,
// LockDelay, Value) Session. A call refuses an option it has no use for
// with an error matching ErrInvalidRequest.
type LockOption func(*lockConfig)

// lockConfig is what an acquisition (or a session) asks for.
type lockConfig struct {
	ttl            time.Duration
	wait           time.Duration
	waitSet        bool
	shared         bool
	limit          int
	permits        int
	value          *string
	idempotencyKey string
	// reentry is the token of the hold a Lease re-enters.
	reentry  string
	onQueued func(position int)

	// session is the session opened here that the lock hangs on;
	// foreignSession the id of one opened elsewhere (InSession).
	session        *Session
	foreignSession string
	// sessionTTL and lockDelay are a new session's (Session).
	sessionTTL time.Duration
	lockDelay  *time.Duration

	// given names the options given, for refusing those a call has no
	// use for.
	given []string
}

func newLockConfig(options []LockOption) lockConfig {
	var cfg lockConfig
	for _, option := range options {
		option(&cfg)
	}
	return cfg
}

// refuse returns an error matching ErrInvalidRequest when one of the named
// options was given, saying why (for example "a session's locks have its
// lease").
func (c *lockConfig) refuse(why string, names ...string) error {
	for _, given := range c.given {
		for _, name := range names {
			if given == name {
				return fmt.Errorf("%w: %s is not an option here: %s", ErrInvalidRequest, name, why)
			}
		}
	}
	return nil
}

// sessionID is the id of the session the lock hangs on ("" for none).
func (c *lockConfig) sessionID() string {
	if c.session != nil {
		return c.session.id
	}
	return c.foreignSession
}

// sessionOnly are the options only Session reads; lockOnly those it
// refuses.
var (
	sessionOnly = []string{"SessionTTL", "LockDelay"}
	lockOnly    = []string{"TTL", "Wait", "Shared", "Limit", "Permits", "IdempotencyKey", "Reentry", "OnQueued", "InSession"}
)

// TTL is the lease length (default: the gateway's, 30 s): how long the
// lock outlives a holder that vanished without a word. A streamed lock is
// renewed by the gateway every TTL/3; a Lease must be extended within it.
// A lock in a session has the session's lease instead (SessionTTL).
func TTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl = d; c.given = append(c.given, "TTL") }
}

// Wait bounds how long Lock (or Lease) waits while another owner holds the
// lock; past it the call returns an error matching ErrLockHeld. Without
// it, Lock waits until its context is done and Lease tries once. A Lock's
// wait longer than the gateway allows one request (60 s by default) is made
// of several requests, each of which joins the lock's queue anew; a Lease's
// may not be longer. TryLock never waits.
func Wait(d time.Duration) LockOption {
	return func(c *lockConfig) { c.wait, c.waitSet = d, true; c.given = append(c.given, "Wait") }
}

// Shared takes a shared (read) lock: many shared holders at once, or one
// exclusive holder.
func Shared() LockOption {
	return func(c *lockConfig) { c.shared = true; c.given = append(c.given, "Shared") }
}

// Limit makes an exclusive lock a counting one (a semaphore): up to n
// holders at once. Every holder must ask with the same limit.
func Limit(n int) LockOption {
	return func(c *lockConfig) { c.limit = n; c.given = append(c.given, "Limit") }
}

// Permits takes n of a counting lock's Limit places at once (1 to the
// limit; default 1). Waiters are served in arrival order: a request for
// many permits at the head of the queue holds back smaller ones behind it.
func Permits(n int) LockOption {
	return func(c *lockConfig) { c.permits = n; c.given = append(c.given, "Permits") }
}

// Value is a public string that everyone who inspects or watches the lock
// (or, given to Session, the session) sees, such as the holder's address
// (never a secret).
func Value(s string) LockOption {
	return func(c *lockConfig) { c.value = &s }
}

// SessionTTL is a session's lease (Session; default: the gateway's, 10 s,
// at least 1 s): how long its locks outlive a process that vanished, or
// a gateway that stopped keeping the session alive. The gateway keeps the
// session alive every SessionTTL/3 while the session's stream is open.
func SessionTTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.sessionTTL = d; c.given = append(c.given, "SessionTTL") }
}

// LockDelay keeps each lock of a session that expires (not one that is
// closed, nor a lock released) free of holders for d more (Session; at
// most 60 s; default none), as in Chubby and Consul: a holder that lost
// its session but is still writing gets that long to notice.
func LockDelay(d time.Duration) LockOption {
	return func(c *lockConfig) { c.lockDelay = &d; c.given = append(c.given, "LockDelay") }
}

// InSession hangs a streamed lock (Lock, TryLock, Campaign) on the session
// with this id, opened elsewhere (Session.ID, handed over by its opener):
// the lock lives as long as that session, and its Context is cancelled
// when the session ends (ReasonSessionEnded). A session that was never
// opened, or has ended, is refused with an error matching
// ErrSessionNotFound. For a session opened by this process, use
// Session.Lock.
func InSession(id string) LockOption {
	return func(c *lockConfig) { c.foreignSession = id; c.given = append(c.given, "InSession") }
}

// IdempotencyKey names a Lease's acquisition for the gateway
// (`Idempotency-Key`, 1 to 200 characters): a retry with the same key and
// the same options, while the grant it made lives, is answered that grant
// again rather than a second one. Lease uses a fresh key per call and
// retries with it by itself; give your own to retry across calls or
// processes. Streamed locks (Lock, TryLock) take none: closing their
// connection ends any grant they made.
func IdempotencyKey(key string) LockOption {
	return func(c *lockConfig) { c.idempotencyKey = key; c.given = append(c.given, "IdempotencyKey") }
}

// Reentry makes a Lease re-enter the lock held with token (the Token of a
// Lease, this process's or one handed over): `POST /locks` with the token
// adds one hold and starts the lease again for TTL, without waiting. The
// Lock returned stands for that one hold: its Release gives back that
// hold alone, and the lock stays held by the token's other holds. A token
// that holds no hold of the key is refused with an error matching
// ErrNotOwner. A re-entry is never sent twice (an answer lost may have
// added a hold), and takes no IdempotencyKey; a streamed lock cannot be
// re-entered.
func Reentry(token string) LockOption {
	return func(c *lockConfig) { c.reentry = token; c.given = append(c.given, "Reentry") }
}

// OnQueued is called with the request's place in the lock's queue (1 is
// next) while a streamed lock waits, each time the place changes. It runs
// on the acquiring goroutine and must not block.
func OnQueued(f func(position int)) LockOption {
	return func(c *lockConfig) { c.onQueued = f; c.given = append(c.given, "OnQueued") }
}

// acquireBody is the JSON body of `POST /locks`.
type acquireBody struct {
	Key     string  `json:"key"`
	TTLMs   int64   `json:"ttl_ms,omitempty"`
	WaitMs  int64   `json:"wait_ms"`
	Mode    string  `json:"mode,omitempty"`
	Limit   int     `json:"limit,omitempty"`
	Permits int     `json:"permits,omitempty"`
	Value   *string `json:"value,omitempty"`
	Session string  `json:"session,omitempty"`
	Token   string  `json:"token,omitempty"`
}

func (c *lockConfig) body(key string, wait time.Duration) acquireBody {
	body := acquireBody{Key: key, TTLMs: millis(c.ttl), WaitMs: millis(wait), Limit: c.limit, Permits: c.permits,
		Value: c.value, Session: c.sessionID(), Token: c.reentry}
	if c.shared {
		body.Mode = "shared"
	}
	return body
}

func (c *lockConfig) mode() string {
	if c.shared {
		return "shared"
	}
	return "exclusive"
}

// millis is d in whole milliseconds, rounded to the nearest.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond/2) / time.Millisecond)
}

// WatchOption configures Watch.
type WatchOption func(*watchConfig)

type watchConfig struct {
	lastEventID string
	idleTimeout time.Duration
}

// LastEventID resumes a watch after the event with this id (a
// WatchEvent.ID handed out earlier): the gateway sends every event after
// it, none twice, or `gap` and a fresh `snapshot` when it no longer keeps
// them.
func LastEventID(id string) WatchOption {
	return func(c *watchConfig) { c.lastEventID = id }
}

// IdleTimeout makes a watch reconnect when nothing, not even a keep-alive
// comment, arrived for d (default 45 s: three of the gateway's 15 s
// keep-alives).
func IdleTimeout(d time.Duration) WatchOption {
	return func(c *watchConfig) { c.idleTimeout = d }
}
