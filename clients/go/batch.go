// LockAll: several locks taken at once (`POST /locks/batch`), all or
// none, for one owner token, held as a LockSet through a streamed batch:
// the gateway renews every lock while the response stays open, and the
// set's Context is cancelled once any of its locks is lost.

package lockgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// BatchLock is one lock of LockAll: its key, and how to hold it (Shared,
// or a counting lock of Limit places of which it takes Permits).
type BatchLock struct {
	Key     string
	Shared  bool
	Limit   int
	Permits int
}

// Keys is a BatchLock for each key, exclusive.
func Keys(keys ...string) []BatchLock {
	locks := make([]BatchLock, len(keys))
	for i, key := range keys {
		locks[i] = BatchLock{Key: key}
	}
	return locks
}

// HeldLock is one lock of a LockSet, with its own fencing token (each key
// counts its own).
type HeldLock struct {
	Key          string `json:"key"`
	Mode         string `json:"mode"`
	FencingToken uint64 `json:"fencing_token"`
}

// batchLockBody and batchBody are the JSON body of `POST /locks/batch`.
type batchLockBody struct {
	Key     string `json:"key"`
	Mode    string `json:"mode,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
}

type batchBody struct {
	Locks   []batchLockBody `json:"locks"`
	TTLMs   int64           `json:"ttl_ms,omitempty"`
	WaitMs  int64           `json:"wait_ms"`
	Session string          `json:"session,omitempty"`
	Value   *string         `json:"value,omitempty"`
}

// batchGrant is the `201` answer to `POST /locks/batch`.
type batchGrant struct {
	Token       string     `json:"token"`
	TTLMs       int64      `json:"ttl_ms"`
	ExpiresAtMs int64      `json:"expires_at_ms"`
	WaitedMs    int64      `json:"waited_ms"`
	Locks       []HeldLock `json:"locks"`
}

// LockSet is several locks held for one owner token, through a streamed
// batch (`POST /locks/batch` with `Accept: text/event-stream`), as a Lock
// is held through a streamed lock: the gateway renews every lock of it
// every TTL/3 for as long as the response stays open, and releases them
// all at once when the connection closes. The set is one thing: its
// Context is cancelled once any of its locks is lost (deleted, revoked,
// released with the token elsewhere, held by another, its gateway gone or
// shutting down, no renewal before the lease could have ended, the session
// it hangs on ended), and the gateway gives back the others. A LockSet is
// safe for use by many goroutines; Release it when done.
type LockSet struct {
	gw     *Gateway
	token  string
	locks  []HeldLock
	waited time.Duration
	// lifetime: Context, Done, Err, TTL, ExpiresAt and Remaining.
	*lifetime
}

// LockAll takes every lock of locks or none, for one owner token, and
// holds them through a streamed batch. Wait bounds the whole batch's wait
// (default: try once; at most the gateway's longest wait, 60 s by
// default); TTL, Value and InSession are taken as Lock takes them
// (Session.LockAll hangs the set on a session opened here). Batches that
// name the same keys in any order never deadlock each other.
//
// A refusal is an error matching ErrLockHeld, whose *Problem's Key names
// the lock that was held, or a *DeadlockError; none of the locks is held
// then. ctx bounds the acquisition only.
func (g *Gateway) LockAll(ctx context.Context, locks []BatchLock, options ...LockOption) (*LockSet, error) {
	return g.lockAll(ctx, locks, newLockConfig(options))
}

func (g *Gateway) lockAll(ctx context.Context, locks []BatchLock, cfg lockConfig) (*LockSet, error) {
	if err := cfg.refuse("each lock of a batch says how it is held (BatchLock)", "Shared", "Limit", "Permits",
		"IdempotencyKey", "Reentry", "OnQueued", "SessionTTL", "LockDelay"); err != nil {
		return nil, err
	}
	if len(locks) == 0 {
		return nil, fmt.Errorf("%w: a batch needs at least one lock", ErrInvalidRequest)
	}
	body := batchBody{WaitMs: millis(cfg.wait), Session: cfg.sessionID(), Value: cfg.value}
	if body.Session == "" {
		body.TTLMs = millis(cfg.ttl)
	}
	for _, lock := range locks {
		entry := batchLockBody{Key: lock.Key, Limit: lock.Limit, Permits: lock.Permits}
		if lock.Shared {
			entry.Mode = "shared"
		}
		body.Locks = append(body.Locks, entry)
	}
	// The batch waits before its answer begins: a refusal is a plain
	// problem response, and the grant the stream's first event.
	var granted batchGrant
	stream, err := g.openHeld(ctx, "/locks/batch", body, cfg.wait+g.timeout, "batch's grant", func(events *eventReader) error {
		return awaitGrant(events, "acquired", &granted, nil)
	})
	var unstreamed *unstreamedAnswer
	if errors.As(err, &unstreamed) && unstreamed.status == http.StatusCreated {
		return nil, g.giveBackBatch(ctx, unstreamed)
	}
	if err != nil {
		return nil, err
	}
	set := newLockSet(ctx, g, granted, cfg, stream)
	go set.lifetime.follow(stream.events, stream.body)
	return set, nil
}

// giveBackBatch releases the locks of a plain grant, the answer of a
// gateway that does not stream batches (one older than the streamed
// batch, met in a rolling upgrade): nothing would renew them.
func (g *Gateway) giveBackBatch(ctx context.Context, answer *unstreamedAnswer) error {
	var granted batchGrant
	if json.Unmarshal(answer.body, &granted) != nil {
		return answer
	}
	for _, lock := range granted.Locks {
		_ = g.releaseAll(detached{ctx}, lock.Key, granted.Token)
	}
	return fmt.Errorf("%w: the gateway at %s granted the batch without streaming it (a gateway older than the streamed batch), and its locks were given back",
		ErrUnavailable, g.base)
}

func newLockSet(parent context.Context, g *Gateway, gr batchGrant, cfg lockConfig, stream *heldStream) *LockSet {
	waited := time.Duration(gr.WaitedMs) * time.Millisecond
	set := &LockSet{gw: g, token: gr.Token, locks: gr.Locks, waited: waited}
	lease := newLeaseClock(time.Duration(gr.TTLMs)*time.Millisecond, gr.ExpiresAtMs, stream.sent, stream.received, waited)
	set.lifetime = newLifetime(parent, lease, stream.close, func(reason, key string, cause error) error {
		if key == "" {
			key = set.String()
		}
		return &LostError{Key: key, Reason: reason, Err: cause}
	})
	// In a session the gateway renews nothing (the session's lease holds
	// the locks): the set ends with the session, or with its stream's news.
	set.lifetime.keep(cfg)
	return set
}

// Token is the owner's secret, the same for every lock of the set. Never
// log it.
func (s *LockSet) Token() string { return s.token }

// Locks are the set's locks, in the order asked for, each with its
// fencing token.
func (s *LockSet) Locks() []HeldLock { return append([]HeldLock(nil), s.locks...) }

// FencingToken is the fencing token of the set's lock on key (0 when the
// set has no such lock): pass it to the resource of that key.
func (s *LockSet) FencingToken(key string) uint64 {
	for _, lock := range s.locks {
		if lock.Key == key {
			return lock.FencingToken
		}
	}
	return 0
}

// Waited is how long the batch waited for its locks.
func (s *LockSet) Waited() time.Duration { return s.waited }

func (s *LockSet) String() string {
	keys := make([]string, len(s.locks))
	for i, lock := range s.locks {
		keys[i] = lock.Key
	}
	return fmt.Sprintf("lockgate.LockSet(%v)", keys)
}

// Release gives every lock back (`DELETE` with the token, each lock, so
// that every lock is free when it returns), then closes the stream;
// Context is then cancelled. Safe to defer and to call more than once
// (later calls return what the first did). It returns nil when it gave
// them all back; the *LostError when the set had been lost (the work done
// under it was not protected all along); or an error matching
// ErrUnavailable when the gateway could not confirm a release (the closed
// stream releases them, or their lease ends them).
func (s *LockSet) Release(ctx context.Context) error {
	return s.lifetime.end(ctx, func() error { return s.release(ctx) })
}

func (s *LockSet) release(ctx context.Context) error {
	first := s.gw.releaseAll(ctx, s.locks[0].Key, s.token)
	end := s.releaseEnd(ctx, first)
	// The first release ended the set's stream, and the gateway gives
	// back the others: what is left of them is gone when Release returns.
	var unanswered error
	for _, lock := range s.locks[1:] {
		err := s.gw.releaseAll(ctx, lock.Key, s.token)
		if _, gone := lossOf(err); err != nil && !gone && unanswered == nil {
			unanswered = unconfirmed(lock.Key, err)
		}
	}
	s.lifetime.finishEnd(ctx, end)
	switch {
	case end != ErrReleased:
		return end
	case first != nil:
		return unconfirmed(s.locks[0].Key, first)
	}
	return unanswered
}

// releaseEnd is how a set ended whose first lock's release answered err.
// When the release was heard, the stream's last event tells: our own
// release of that lock, given back; another end (a lock lost, or released
// elsewhere, before Release), lost. Without that event the answer decides.
func (s *LockSet) releaseEnd(ctx context.Context, err error) error {
	reason, gone := lossOf(err)
	if err != nil && !gone {
		return ErrReleased // not confirmed: closing the stream releases them
	}
	told := s.lifetime.lastNews(ctx, time.Second)
	switch {
	case told.event == "released" && told.key == s.locks[0].Key && !gone:
		return ErrReleased
	case told.event != "":
		return s.lifetime.lostError(told.reason, told.key, nil)
	case gone:
		return s.lifetime.lostError(reason, s.locks[0].Key, err)
	}
	return ErrReleased
}

// LockAll takes several locks at once hanging on the session, as
// Gateway.LockAll takes them: they live as long as the session (TTL is
// refused) unless released first, and the set's Context is cancelled when
// the session ends. Close releases them with the session's other locks.
func (s *Session) LockAll(ctx context.Context, locks []BatchLock, options ...LockOption) (*LockSet, error) {
	cfg := newLockConfig(options)
	if err := cfg.refuse("the locks are in this session, whose lease is theirs", "InSession", "TTL"); err != nil {
		return nil, err
	}
	if err := s.ended(); err != nil {
		return nil, err
	}
	cfg.session = s
	set, err := s.gw.lockAll(ctx, locks, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.adopt(set.lifetime); err != nil {
		return nil, err
	}
	return set, nil
}
