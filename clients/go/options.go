// The functional options of an acquisition (LockOption) and of a watch
// (WatchOption).

package lockgate

import "time"

// LockOption configures Lock, TryLock, Lease and Campaign.
type LockOption func(*lockConfig)

// lockConfig is what an acquisition asks for. Options that come with
// sessions and permits (a session to hang the lock on, a number of places
// of a counting lock) will be fields here too.
type lockConfig struct {
	ttl            time.Duration
	wait           time.Duration
	waitSet        bool
	shared         bool
	limit          int
	value          *string
	idempotencyKey string
	onQueued       func(position int)
}

func newLockConfig(options []LockOption) lockConfig {
	var cfg lockConfig
	for _, option := range options {
		option(&cfg)
	}
	return cfg
}

// TTL is the lease length (default: the gateway's, 30 s): how long the
// lock outlives a holder that vanished without a word. A streamed lock is
// renewed by the gateway every TTL/3; a Lease must be extended within it.
func TTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl = d }
}

// Wait bounds how long Lock (or Lease) waits while another owner holds the
// lock; past it the call returns an error matching ErrLockHeld. Without
// it, Lock waits until its context is done and Lease tries once. A Lock's
// wait longer than the gateway allows one request (60 s by default) is made
// of several requests, each of which joins the lock's queue anew; a Lease's
// may not be longer. TryLock never waits.
func Wait(d time.Duration) LockOption {
	return func(c *lockConfig) { c.wait, c.waitSet = d, true }
}

// Shared takes a shared (read) lock: many shared holders at once, or one
// exclusive holder.
func Shared() LockOption {
	return func(c *lockConfig) { c.shared = true }
}

// Limit makes an exclusive lock a counting one (a semaphore): up to n
// holders at once. Every holder must ask with the same limit.
func Limit(n int) LockOption {
	return func(c *lockConfig) { c.limit = n }
}

// Value is a public string that everyone who inspects or watches the lock
// sees, such as the holder's address (never a secret).
func Value(s string) LockOption {
	return func(c *lockConfig) { c.value = &s }
}

// IdempotencyKey names a Lease's acquisition for the gateway
// (`Idempotency-Key`, 1 to 200 characters): a retry with the same key and
// the same options, while the grant it made lives, is answered that grant
// again rather than a second one. Lease uses a fresh key per call and
// retries with it by itself; give your own to retry across calls or
// processes. Streamed locks (Lock, TryLock) take none: closing their
// connection ends any grant they made.
func IdempotencyKey(key string) LockOption {
	return func(c *lockConfig) { c.idempotencyKey = key }
}

// OnQueued is called with the request's place in the lock's queue (1 is
// next) while a streamed lock waits, each time the place changes. It runs
// on the acquiring goroutine and must not block.
func OnQueued(f func(position int)) LockOption {
	return func(c *lockConfig) { c.onQueued = f }
}

// acquireBody is the JSON body of `POST /locks`.
type acquireBody struct {
	Key    string  `json:"key"`
	TTLMs  int64   `json:"ttl_ms,omitempty"`
	WaitMs int64   `json:"wait_ms"`
	Mode   string  `json:"mode,omitempty"`
	Limit  int     `json:"limit,omitempty"`
	Value  *string `json:"value,omitempty"`
}

func (c *lockConfig) body(key string, wait time.Duration) acquireBody {
	body := acquireBody{Key: key, TTLMs: millis(c.ttl), WaitMs: millis(wait), Limit: c.limit, Value: c.value}
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
