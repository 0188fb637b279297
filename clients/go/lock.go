// Lock: a held lock, streamed (the gateway renews it while the response
// stays open) or a lease (the holder extends it), whose Context is
// cancelled once it is lost.

package lockgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// errExtendStreamed is Extend's answer for a streamed lock.
var errExtendStreamed = fmt.Errorf("%w: a streamed lock is renewed by the gateway; Extend is for a Lease", ErrInvalidRequest)

type lockState int

const (
	held lockState = iota
	releasing
	released
	lost
)

// grant is a `201` answer to `POST /locks`, and a streamed lock's
// `acquired` event.
type grant struct {
	Key          string `json:"key"`
	Token        string `json:"token"`
	FencingToken uint64 `json:"fencing_token"`
	TTLMs        int64  `json:"ttl_ms"`
	ExpiresAtMs  int64  `json:"expires_at_ms"`
	Holds        int    `json:"holds"`
	WaitedMs     int64  `json:"waited_ms"`
}

// leaseState is the answer to `PUT /locks/{key}/ttl` and `/value`.
type leaseState struct {
	TTLMs        int64  `json:"ttl_ms"`
	ExpiresAtMs  int64  `json:"expires_at_ms"`
	FencingToken uint64 `json:"fencing_token"`
}

// Lock is a held lock. Its Context is cancelled once the lock is lost, or
// released; Err then says which, and why. A Lock is safe for use by many
// goroutines. Release it when done (a Lock dropped without Release stays
// held as long as its process keeps its connection, or its lease runs).
type Lock struct {
	gw       *Gateway
	key      string
	token    string
	waited   time.Duration
	permits  int
	streamed bool
	replayed bool

	ctx    context.Context
	cancel func(cause error)

	// closeStream ends a streamed lock's connection (which makes the
	// gateway release what it still holds); followed is closed when the
	// goroutine reading its events has returned. Both are nil for a lease.
	closeStream context.CancelFunc
	followed    chan struct{}

	// session is the session opened here that the lock hangs on (nil
	// for none, or one opened elsewhere): its lease is the lock's.
	session *Session
	// inSession: the lock hangs on a session, whose keepalive, not the
	// gateway's renewal of the lock, keeps it; it has no timer of its own.
	inSession bool

	mu sync.Mutex
	// fencing and mode change with an upgrade or a downgrade.
	fencing uint64
	mode    string
	state   lockState
	err     error
	value   *string
	// lease is the lock's lease by this process's clock; its timer ends
	// the lock when no renewal (or Extend) came in time.
	lease leaseClock

	releaseOnce sync.Once
	releaseErr  error
}

// newLock makes the Lock for a grant. sent is when the request that was
// granted was sent, received when its grant arrived; the lease's local
// deadline is timed from the earliest moment the grant could have been
// made (the sending, plus the wait the gateway reports), so it never falls
// after the real end.
// closeStream is a streamed lock's (nil for a lease).
func newLock(parent context.Context, g *Gateway, gr grant, cfg lockConfig, sent, received time.Time, closeStream context.CancelFunc) *Lock {
	waited := time.Duration(gr.WaitedMs) * time.Millisecond
	l := &Lock{
		gw:          g,
		key:         gr.Key,
		token:       gr.Token,
		fencing:     gr.FencingToken,
		mode:        cfg.mode(),
		waited:      waited,
		permits:     cfg.permits,
		value:       cfg.value,
		streamed:    closeStream != nil,
		closeStream: closeStream,
		session:     cfg.session,
		inSession:   cfg.sessionID() != "",
		lease:       newLeaseClock(time.Duration(gr.TTLMs)*time.Millisecond, gr.ExpiresAtMs, sent, received, waited),
	}
	if l.streamed {
		l.followed = make(chan struct{})
	}
	l.ctx, l.cancel = withEndCause(detached{parent})
	// The gateway does not renew a lock in a session (the session's
	// keepalive keeps it): its end is the session's, or its stream's news.
	if !l.inSession {
		l.mu.Lock()
		l.lease.start(l.onDeadline)
		l.mu.Unlock()
	}
	return l
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.key }

// Token is the owner's secret, needed to release, extend or re-enter the
// lock through the HTTP API. Never log it.
func (l *Lock) Token() string { return l.token }

// FencingToken is this hold's fencing token: larger than that of every
// earlier grant of the key. Pass it to the resource the lock protects, so
// that it can refuse the writes of a holder whose lease ran out. Upgrade
// gives the hold a new, larger one.
func (l *Lock) FencingToken() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fencing
}

// Mode is "exclusive" or "shared" (Upgrade and Downgrade change it).
func (l *Lock) Mode() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode
}

// Permits is how many places of a counting lock the holder asked for
// (Permits; 0 when it did not ask, which the gateway counts as 1).
func (l *Lock) Permits() int { return l.permits }

// Upgrade makes this shared hold the exclusive one without letting go
// (`PUT /locks/{key}/mode`), waiting for the other shared holders to leave
// for at most the Wait option (default: not at all), ahead of every request
// that arrived after it. The hold gets a new, larger FencingToken. When the
// wait runs out it returns an error matching ErrLockHeld and the shared
// hold is kept; when another holder is upgrading already, a
// *DeadlockError (ErrDeadlock).
func (l *Lock) Upgrade(ctx context.Context, options ...LockOption) error {
	cfg := newLockConfig(options)
	if err := cfg.refuse("an upgrade takes only Wait", "TTL", "Shared", "Limit", "Permits", "IdempotencyKey",
		"OnQueued", "InSession", "SessionTTL", "LockDelay"); err != nil {
		return err
	}
	return l.changeMode(ctx, "exclusive", cfg.wait)
}

// Downgrade makes this exclusive hold a shared one without letting go (the
// fencing token stays), letting in the shared requests waiting behind it.
func (l *Lock) Downgrade(ctx context.Context) error {
	return l.changeMode(ctx, "shared", 0)
}

func (l *Lock) changeMode(ctx context.Context, mode string, wait time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	a, err := l.gw.do(ctx, call{method: http.MethodPut, path: lockPath(l.key, "/mode"), extra: wait,
		body: map[string]any{"token": l.token, "mode": mode, "wait_ms": millis(wait)}})
	if err != nil {
		return l.failed(err)
	}
	var changed struct {
		Mode         string `json:"mode"`
		FencingToken uint64 `json:"fencing_token"`
	}
	if err := decode(a, &changed); err != nil {
		return err
	}
	l.mu.Lock()
	l.mode, l.fencing = changed.Mode, changed.FencingToken
	l.mu.Unlock()
	return nil
}

// Waited is how long the request waited in the lock's queue.
func (l *Lock) Waited() time.Duration { return l.waited }

// Streamed reports whether the gateway renews the lock (Lock, TryLock,
// Campaign) rather than its holder (Lease).
func (l *Lock) Streamed() bool { return l.streamed }

// Replayed reports whether a Lease's grant was answered to an earlier
// attempt of the same acquisition, whose answer was lost
// (`Idempotent-Replayed: true`).
func (l *Lock) Replayed() bool { return l.replayed }

// Context is cancelled once the lock is lost or released. Give it to the
// work the lock protects, so that the work stops when the lock is gone.
// It carries the values of the context the lock was acquired with, but not
// its cancellation: that context bounds the acquisition only. On Go 1.20
// and later context.Cause(lock.Context()) is what Err returns.
func (l *Lock) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lock is held; ErrReleased once Release gave it
// back; and once it was lost, a *LostError (errors.Is(err, ErrLockLost))
// whose Reason says why.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// TTL is the lease length; for a lock in a session, the session's.
func (l *Lock) TTL() time.Duration {
	if l.session != nil {
		return l.session.TTL()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease.ttl
}

// ExpiresAt is when the lease ends by the Redis server's clock, as the
// gateway last reported it (the grant, the last renewal, Extend). A lock
// in a session has the session's lease: that of a Session opened here as
// its last keepalive reported it, that of one opened elsewhere (InSession)
// as the grant did.
func (l *Lock) ExpiresAt() time.Time {
	if l.session != nil {
		return l.session.ExpiresAt()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.UnixMilli(l.lease.expiresAtMs)
}

// Remaining is how long the lease is sure to last, by this process's
// clock, unless a renewal (or Extend) comes first; 0 once it is not held.
// For a lock in a session, see ExpiresAt.
func (l *Lock) Remaining() time.Duration {
	l.mu.Lock()
	state := l.state
	left := l.lease.remaining()
	l.mu.Unlock()
	switch {
	case state != held:
		return 0
	case l.session != nil:
		return l.session.Remaining()
	}
	return left
}

// Value is the holder's public value, as last set ("" when none).
func (l *Lock) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.value == nil {
		return ""
	}
	return *l.value
}

// Release gives the lock back: `DELETE /locks/{key}` with the token, so
// the next owner may take it as soon as Release returns, then, for a
// streamed lock, the connection is closed. Context is then cancelled and
// Err returns ErrReleased. It is safe to defer, and to call more than once
// (later calls return what the first did).
//
// It returns nil when it gave the lock back; the *LostError when the lock
// had been lost (the work done under it was not protected all along); or
// an error matching ErrUnavailable when the gateway could not confirm the
// release. A streamed lock is released all the same then, as the gateway
// releases a lock whose connection closes, and a lease ends with its TTL.
func (l *Lock) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() { l.releaseErr = l.release(ctx) })
	return l.releaseErr
}

func (l *Lock) release(ctx context.Context) error {
	if ended, err := l.beginRelease(); !ended {
		l.shut(ctx)
		return err
	}
	err := l.gw.releaseAll(ctx, l.key, l.token)
	end := ErrReleased
	switch {
	case errors.Is(err, ErrLockLost):
		end = &LostError{Key: l.key, Reason: ReasonLockGone, Err: err}
	case errors.Is(err, ErrNotOwner):
		end = &LostError{Key: l.key, Reason: ReasonHeldByAnother, Err: err}
	case err != nil:
		err = fmt.Errorf("lockgate: the release of %s was not confirmed (the lock ends when its stream closes or its lease runs out): %w", l.key, err)
	}
	l.finishRelease(ctx, end)
	if end != ErrReleased {
		return end
	}
	return err
}

// beginRelease marks a held lock as being released, so that news of its
// end (its stream's `released`, a loss) no longer changes how it ended;
// false, with how it ended, when it is no longer held.
func (l *Lock) beginRelease() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case held:
		l.state = releasing
		return true, nil
	case released:
		return false, nil
	}
	return false, l.err
}

// finishRelease ends a lock being released: released when end is
// ErrReleased, lost (end, a *LostError) otherwise; it closes the stream
// and cancels the context.
func (l *Lock) finishRelease(ctx context.Context, end error) {
	l.mu.Lock()
	l.err = end
	if end == ErrReleased {
		l.state = released
	} else {
		l.state = lost
	}
	l.lease.stop()
	l.mu.Unlock()
	l.shut(ctx)
	l.cancel(end)
	l.detach()
}

// detach takes an ended lock off its session's list.
func (l *Lock) detach() {
	if l.session != nil {
		l.session.forget(l)
	}
}

// shut closes a streamed lock's connection and waits (while ctx lasts) for
// the goroutine reading it to return.
func (l *Lock) shut(ctx context.Context) {
	if l.closeStream == nil {
		return
	}
	l.closeStream()
	select {
	case <-l.followed:
	case <-ctx.Done():
	}
}

// Extend makes a lease end ttl from now (`PUT /locks/{key}/ttl`); extend it
// again before then, or lose it. A streamed lock needs no Extend (the
// gateway renews it at the TTL it was taken with) and refuses one with an
// error matching ErrInvalidRequest. Returns the *LostError when the lease
// already ended.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l.streamed {
		return errExtendStreamed
	}
	if err := l.Err(); err != nil {
		return err
	}
	sent := time.Now()
	a, err := l.gw.do(ctx, call{method: http.MethodPut, path: lockPath(l.key, "/ttl"),
		body: map[string]any{"token": l.token, "ttl_ms": millis(ttl)}})
	if err != nil {
		return l.failed(err)
	}
	var state leaseState
	if err := decode(a, &state); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == lost {
		return l.err
	}
	l.lease.extended(time.Duration(state.TTLMs)*time.Millisecond, state.ExpiresAtMs, sent)
	return nil
}

// SetValue replaces the holder's public value (`PUT /locks/{key}/value`,
// etcd's "proclaim"). Returns the *LostError when the lock is gone.
func (l *Lock) SetValue(ctx context.Context, value string) error {
	if err := l.Err(); err != nil {
		return err
	}
	_, err := l.gw.do(ctx, call{method: http.MethodPut, path: lockPath(l.key, "/value"),
		body: map[string]any{"token": l.token, "value": value}})
	if err != nil {
		return l.failed(err)
	}
	l.mu.Lock()
	l.value = &value
	l.mu.Unlock()
	return nil
}

// failed turns the gateway's news that the lock is gone into its loss.
func (l *Lock) failed(err error) error {
	switch {
	case errors.Is(err, ErrLockLost):
		l.lose(ReasonLockGone, err)
	case errors.Is(err, ErrNotOwner):
		l.lose(ReasonHeldByAnother, err)
	default:
		return err
	}
	if lostErr := l.Err(); lostErr != nil {
		return lostErr
	}
	return err
}

func (l *Lock) String() string {
	return fmt.Sprintf("lockgate.Lock(%s, fencing token %d)", l.key, l.FencingToken())
}

// lose marks the lock lost (once), closes its stream and cancels its
// context with the *LostError. While it is being released, the release
// decides how it ended.
func (l *Lock) lose(reason string, cause error) {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	l.loseLocked(reason, cause)
}

// loseLocked is lose with l.mu held; it unlocks it.
func (l *Lock) loseLocked(reason string, cause error) {
	err := &LostError{Key: l.key, Reason: reason, Err: cause}
	l.state = lost
	l.err = err
	l.lease.stop()
	l.mu.Unlock()
	if l.closeStream != nil {
		l.closeStream()
	}
	l.cancel(err)
	l.detach()
}

// onDeadline runs when the lease could have ended: the lock is lost unless
// a renewal moved the deadline meanwhile.
func (l *Lock) onDeadline() {
	l.mu.Lock()
	if l.state != held || !l.lease.due() {
		l.mu.Unlock()
		return
	}
	l.loseLocked(ReasonLeaseExpired, nil)
}

// renewed moves the deadline after a `renewed` event.
func (l *Lock) renewed(expiresAtMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held && l.state != releasing {
		return
	}
	l.lease.renewed(expiresAtMs)
}

// follow reads a streamed lock's events until its stream ends, and turns
// that end into the lock's release or loss.
func (l *Lock) follow(events *eventReader, body io.Closer) {
	defer close(l.followed)
	defer body.Close()
	for {
		event, err := events.Next()
		if err != nil {
			l.lose(ReasonConnectionLost, err)
			return
		}
		switch event.Type {
		case "renewed":
			var renewal struct {
				ExpiresAtMs int64 `json:"expires_at_ms"`
			}
			if json.Unmarshal([]byte(event.Data), &renewal) == nil {
				l.renewed(renewal.ExpiresAtMs)
			}
		case "released":
			// Our own Release's DELETE ends the stream this way too; then
			// the release is already under way and lose does nothing.
			l.lose(ReasonReleasedElsewhere, nil)
			return
		case "lost":
			var loss struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal([]byte(event.Data), &loss)
			if loss.Reason == "" {
				loss.Reason = ReasonLockGone
			}
			var cause error
			if loss.Reason == ReasonSessionEnded && l.session != nil {
				cause = l.session.Err()
			}
			l.lose(loss.Reason, cause)
			return
		}
	}
}

// releaseAll gives back every hold of token, until the lock is free (or
// not ours: nothing is left to give back). After a DELETE that got no
// answer it tries once more, and then counts `lock-not-found` as released:
// the first DELETE may have done it.
func (g *Gateway) releaseAll(ctx context.Context, key, token string) error {
	header := http.Header{"Lock-Token": {token}}
	retried := false
	for {
		a, err := g.do(ctx, call{method: http.MethodDelete, path: lockPath(key, ""), header: header})
		switch {
		case err == nil && a.status == http.StatusNoContent:
			return nil
		case err == nil:
			var rest struct {
				Holds int `json:"holds"`
			}
			if decode(a, &rest) != nil || rest.Holds == 0 {
				return nil
			}
		case retried && (errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotOwner)):
			return nil
		case !retried && errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
			var problem *Problem
			if errors.As(err, &problem) {
				return err // the gateway answered: it did nothing
			}
			retried = true
		default:
			return err
		}
	}
}
