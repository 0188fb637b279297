// LockAll: several locks taken at once (`POST /locks/batch`), all or
// none, for one owner token, held as a LockSet that the client renews and
// whose Context is cancelled once any of its locks is lost.

package lockgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
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

// LockSet is several locks held for one owner token. The gateway does not
// stream a batch: each lock is an ordinary lease of the token, which the
// set renews (`PUT /locks/{key}/ttl`, every TTL/3) while it is held. Its
// Context is cancelled once any lock is lost: a renewal found it gone
// (expired, revoked, released with the token elsewhere), no renewal
// succeeded before the lease could have ended, or the session it hangs on
// ended. A LockSet is safe for use by many goroutines; Release it when done.
type LockSet struct {
	gw     *Gateway
	token  string
	locks  []HeldLock
	waited time.Duration

	ctx    context.Context
	cancel func(cause error)
	// stopRenewing ends the renewing goroutine; renewed is closed once it
	// has returned (nil for a set in a session, which is not renewed).
	stopRenewing context.CancelFunc
	renewed      chan struct{}

	mu    sync.Mutex
	state lockState
	err   error
	lease leaseClock

	releaseOnce sync.Once
	releaseErr  error
}

// LockAll takes every lock of locks or none (`POST /locks/batch`), for one
// owner token. Wait bounds the whole batch's wait (default: try once);
// TTL, Value and InSession are taken as Lock takes them (Session.LockAll
// hangs the set on a session opened here). Batches that name the same
// keys in any order never deadlock each other.
//
// A refusal is an error matching ErrLockHeld, whose *Problem's Key names
// the lock that was held, or a *DeadlockError; none of the locks is held
// then. ctx bounds the acquisition only.
func (g *Gateway) LockAll(ctx context.Context, locks []BatchLock, options ...LockOption) (*LockSet, error) {
	return g.lockAll(ctx, locks, newLockConfig(options))
}

func (g *Gateway) lockAll(ctx context.Context, locks []BatchLock, cfg lockConfig) (*LockSet, error) {
	if err := cfg.refuse("each lock of a batch says how it is held (BatchLock)", "Shared", "Limit", "Permits",
		"IdempotencyKey", "OnQueued", "SessionTTL", "LockDelay"); err != nil {
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
	sent := time.Now()
	// Not sent again when the answer is lost: a second batch would wait
	// for the locks the first may hold (their lease ends them).
	a, err := g.do(ctx, call{method: http.MethodPost, path: "/locks/batch", body: body, extra: cfg.wait})
	if err != nil {
		return nil, err
	}
	var granted batchGrant
	if err := decode(a, &granted); err != nil {
		return nil, err
	}
	return newLockSet(ctx, g, granted, cfg, sent, time.Now()), nil
}

func newLockSet(parent context.Context, g *Gateway, gr batchGrant, cfg lockConfig, sent, received time.Time) *LockSet {
	waited := time.Duration(gr.WaitedMs) * time.Millisecond
	set := &LockSet{
		gw:     g,
		token:  gr.Token,
		locks:  gr.Locks,
		waited: waited,
		lease:  newLeaseClock(time.Duration(gr.TTLMs)*time.Millisecond, gr.ExpiresAtMs, sent, received, waited),
	}
	set.ctx, set.cancel = withEndCause(detached{parent})
	switch {
	case cfg.session != nil:
		// Its lease is the session's: the session's end is the set's.
		go func() {
			select {
			case <-cfg.session.Done():
				set.lose(ReasonSessionEnded, cfg.session.Err())
			case <-set.ctx.Done():
			}
		}()
	case cfg.sessionID() == "":
		set.mu.Lock()
		set.lease.start(set.onDeadline)
		set.mu.Unlock()
		var renewing context.Context
		renewing, set.stopRenewing = context.WithCancel(context.Background())
		set.renewed = make(chan struct{})
		go set.renew(renewing, time.Duration(gr.TTLMs)*time.Millisecond)
	}
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

// Context is cancelled once the set is lost or released.
func (s *LockSet) Context() context.Context { return s.ctx }

// Done is Context().Done().
func (s *LockSet) Done() <-chan struct{} { return s.ctx.Done() }

// Err is nil while every lock is held; ErrReleased after Release; a
// *LostError (ErrLockLost) once the set was lost.
func (s *LockSet) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *LockSet) String() string {
	keys := make([]string, len(s.locks))
	for i, lock := range s.locks {
		keys[i] = lock.Key
	}
	return fmt.Sprintf("lockgate.LockSet(%v)", keys)
}

// renew extends every lock each period (a third of the lease) until ctx
// ends; a lock found gone loses the set, an unreachable gateway is left to
// the deadline (a later renewal may still come in time).
func (s *LockSet) renew(ctx context.Context, ttl time.Duration) {
	defer close(s.renewed)
	ticker := time.NewTicker(ttl / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		earliest := int64(-1)
		for _, lock := range s.locks {
			a, err := s.gw.do(ctx, call{method: http.MethodPut, path: lockPath(lock.Key, "/ttl"),
				body: map[string]any{"token": s.token, "ttl_ms": ttl.Milliseconds()}})
			var state leaseState
			if err == nil {
				err = decode(a, &state)
			}
			switch {
			case errors.Is(err, ErrLockLost), errors.Is(err, ErrNotOwner):
				s.lose(ReasonLockGone, err)
				return
			case err != nil:
				earliest = 0
			case earliest < 0 || state.ExpiresAtMs < earliest:
				earliest = state.ExpiresAtMs
			}
			if earliest == 0 {
				break
			}
		}
		if earliest > 0 {
			s.mu.Lock()
			if s.state == held {
				s.lease.renewed(earliest)
			}
			s.mu.Unlock()
		}
	}
}

func (s *LockSet) onDeadline() {
	s.mu.Lock()
	due := s.state == held && s.lease.due()
	s.mu.Unlock()
	if due {
		s.lose(ReasonLeaseExpired, nil)
	}
}

// lose marks a held set lost (once) and cancels its context.
func (s *LockSet) lose(reason string, cause error) {
	s.mu.Lock()
	if s.state != held {
		s.mu.Unlock()
		return
	}
	err := &LostError{Key: s.String(), Reason: reason, Err: cause}
	s.state, s.err = lost, err
	s.lease.stop()
	s.mu.Unlock()
	if s.stopRenewing != nil {
		s.stopRenewing()
	}
	s.cancel(err)
}

// Release gives every lock back (`DELETE` with the token) and stops the
// renewals; Context is then cancelled. Safe to defer and to call more than
// once. It returns nil when it gave them all back; the *LostError when the
// set had been lost; or the first failure to release one (its lease ends
// it).
func (s *LockSet) Release(ctx context.Context) error {
	s.releaseOnce.Do(func() { s.releaseErr = s.release(ctx) })
	return s.releaseErr
}

func (s *LockSet) release(ctx context.Context) error {
	s.mu.Lock()
	wasHeld := s.state == held
	if wasHeld {
		s.state = releasing
	}
	s.lease.stop()
	s.mu.Unlock()
	if s.stopRenewing != nil {
		s.stopRenewing()
		<-s.renewed
	}
	var first error
	for _, lock := range s.locks {
		if err := s.gw.releaseAll(ctx, lock.Key, s.token); err != nil && first == nil {
			first = err
		}
	}
	s.mu.Lock()
	end := s.err
	if wasHeld {
		end = ErrReleased
		s.state, s.err = released, ErrReleased
	}
	s.mu.Unlock()
	s.cancel(end)
	if !wasHeld {
		return end
	}
	return first
}

// LockAll takes several locks at once hanging on the session, as
// Gateway.LockAll takes them: they live as long as the session (TTL is
// refused) unless released first, and the set's Context is cancelled when
// the session ends.
func (s *Session) LockAll(ctx context.Context, locks []BatchLock, options ...LockOption) (*LockSet, error) {
	cfg := newLockConfig(options)
	if err := cfg.refuse("the locks are in this session, whose lease is theirs", "InSession", "TTL"); err != nil {
		return nil, err
	}
	if err := s.ended(); err != nil {
		return nil, err
	}
	cfg.session = s
	return s.gw.lockAll(ctx, locks, cfg)
}
