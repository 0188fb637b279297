// lifetime: what a Lock, a LockSet and a Session each carry, written once:
// whether it is still held and how it ended, its lease by this process's
// clock, the context its end cancels, the stream that holds it, and (for a
// session) the locks and sets that end with it.

package lockgate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"
)

type lifeState int

const (
	alive lifeState = iota
	// ending: its owner's Release or Close is under way, and decides how
	// it ended; news of its end no longer changes that.
	ending
	// givenBack: Release or Close ended it.
	givenBack
	lost
)

// streamNews is the data of a stream's events after its grant: `renewed`,
// and the last one, `released` or `lost` (a lock's, a set's) or `ended` (a
// session's).
type streamNews struct {
	ExpiresAtMs int64  `json:"expires_at_ms"`
	Reason      string `json:"reason"`
	Key         string `json:"key"`
}

// lastEvents maps the event that ends a stream to the reason of the end
// when the event names none.
var lastEvents = map[string]string{
	"released": ReasonReleasedElsewhere,
	"lost":     ReasonLockGone,
	"ended":    ReasonSessionExpired,
}

// toldEnd is a stream's last event, as the gateway told it.
type toldEnd struct {
	event, reason, key string
}

// lifetime is the state a held thing keeps, embedded in a Lock, a LockSet
// and a Session: its exported methods are theirs. It is safe for use by
// many goroutines.
type lifetime struct {
	ctx    context.Context
	cancel func(cause error)
	// lostError makes the error of a loss from its reason, the lock the
	// gateway named ("" for none) and what broke: a *LostError, or a
	// session's *SessionLostError.
	lostError func(reason, key string, cause error) error

	// closeStream ends the connection that holds it, which makes the
	// gateway give back what it still holds (nil for a lease); followed is
	// closed once the goroutine reading its events has returned.
	closeStream context.CancelFunc
	followed    chan struct{}

	// parent is the lifetime of the session opened here that it hangs on
	// (nil for none): its lease is the session's, and so is its end.
	parent *lifetime

	mu    sync.Mutex
	state lifeState
	err   error
	lease leaseClock
	told  toldEnd
	// dependents end with it: the locks and sets of a session.
	dependents map[*lifetime]struct{}

	endOnce sync.Once
	endErr  error
}

// newLifetime starts the lifetime of something granted with lease, held
// by the stream that closeStream ends (nil for a lease). Its context has
// the values of parent but not its cancellation: parent bounds the
// acquisition only.
func newLifetime(parent context.Context, lease leaseClock, closeStream context.CancelFunc,
	lostError func(reason, key string, cause error) error) *lifetime {
	lt := &lifetime{lease: lease, closeStream: closeStream, lostError: lostError}
	if closeStream != nil {
		lt.followed = make(chan struct{})
	}
	lt.ctx, lt.cancel = withEndCause(detached{parent})
	return lt
}

// keep starts keeping it as cfg asks: a lock or a set in a session has
// the session's lease (the session's lifetime is its parent when the
// session was opened here); any other has its own, timed here.
func (lt *lifetime) keep(cfg lockConfig) {
	if cfg.session != nil {
		lt.parent = cfg.session.lifetime
	}
	if cfg.sessionID() == "" {
		lt.keepTime()
	}
}

// keepTime arms the lease's timer: it is lost once the lease could have
// ended without a renewal (or Extend, or keepalive).
func (lt *lifetime) keepTime() {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.lease.start(lt.onDeadline)
}

func (lt *lifetime) onDeadline() {
	lt.mu.Lock()
	if lt.state != alive || !lt.lease.due() {
		lt.mu.Unlock()
		return
	}
	lt.loseLocked(ReasonLeaseExpired, "", nil)
}

// Context is cancelled once it has ended: a lock or a set lost or
// released, a session lost or closed (and with a session, every lock and
// set taken through it). Give it to the work it protects, so that the work
// stops when it ends. It carries the values of the context it was taken
// with, but not its cancellation: that context bounds the acquisition
// only. On Go 1.20 and later context.Cause of it is what Err returns.
func (lt *lifetime) Context() context.Context { return lt.ctx }

// Done is Context().Done().
func (lt *lifetime) Done() <-chan struct{} { return lt.ctx.Done() }

// Err is nil while it is held. Once it was given back: ErrReleased for a
// lock or a set (Release, or its session's Close), ErrSessionClosed for a
// session (Close). Once it was lost: for a lock or a set, a *LostError
// (errors.Is(err, ErrLockLost)); for a session, a *SessionLostError
// (errors.Is(err, ErrSessionNotFound)); its Reason says why.
func (lt *lifetime) Err() error {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.err
}

func (lt *lifetime) current() (lifeState, error) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.state, lt.err
}

// TTL is the lease's length; for a lock or a set in a session, the
// session's.
func (lt *lifetime) TTL() time.Duration {
	if lt.parent != nil {
		return lt.parent.TTL()
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.lease.ttl
}

// ExpiresAt is when the lease ends (a set's earliest) by the Redis
// server's clock, as the gateway last reported it: the grant, the last
// renewal or keepalive, Extend. A lock or a set in a Session opened here
// has the session's, as its last keepalive reported it; one in a session
// opened elsewhere (InSession), as its grant did.
func (lt *lifetime) ExpiresAt() time.Time {
	if lt.parent != nil {
		return lt.parent.ExpiresAt()
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return time.UnixMilli(lt.lease.expiresAtMs)
}

// Remaining is how long the lease is sure to last, by this process's
// clock, unless a renewal (or Extend, or keepalive) comes first; 0 once it
// has ended. For a lock or a set in a session opened elsewhere, see
// ExpiresAt.
func (lt *lifetime) Remaining() time.Duration {
	lt.mu.Lock()
	state, left := lt.state, lt.lease.remaining()
	lt.mu.Unlock()
	switch {
	case state != alive:
		return 0
	case lt.parent != nil:
		return lt.parent.Remaining()
	}
	return left
}

// renewed moves the lease's deadline after a renewal that reported
// expiresAtMs.
func (lt *lifetime) renewed(expiresAtMs int64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.state == alive || lt.state == ending {
		lt.lease.renewed(expiresAtMs)
	}
}

// extended sets a new lease (Extend); the loss instead when it was lost.
func (lt *lifetime) extended(ttl time.Duration, expiresAtMs int64, sent time.Time) error {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.state == lost {
		return lt.err
	}
	lt.lease.extended(ttl, expiresAtMs, sent)
	return nil
}

// lose ends it as lost, once, while it is alive: it closes its stream,
// cancels its context with the loss, and loses its dependents with it.
func (lt *lifetime) lose(reason, key string, cause error) {
	lt.mu.Lock()
	if lt.state != alive {
		lt.mu.Unlock()
		return
	}
	lt.loseLocked(reason, key, cause)
}

// loseLocked is lose with lt.mu held; it unlocks it.
func (lt *lifetime) loseLocked(reason, key string, cause error) {
	err := lt.lostError(reason, key, cause)
	lt.state, lt.err = lost, err
	lt.lease.stop()
	dependents := lt.takeDependentsLocked()
	lt.mu.Unlock()
	if lt.closeStream != nil {
		lt.closeStream()
	}
	lt.cancel(err)
	lt.detach()
	for _, dependent := range dependents {
		dependent.lose(ReasonSessionEnded, "", err)
	}
}

// end runs its owner's end (Release, Close) the first time, when it is
// alive, marked as being ended so that news of its end no longer changes
// how it ended; when it is not alive, it only closes the stream, and
// returns the loss (nil when it is being, or was, given back: by its
// session's Close, say). Every call returns what the first did.
func (lt *lifetime) end(ctx context.Context, end func() error) error {
	lt.endOnce.Do(func() {
		if ok, err := lt.beginEnd(); !ok {
			lt.shut(ctx)
			lt.endErr = err
			return
		}
		lt.endErr = end()
	})
	return lt.endErr
}

// beginEnd marks it as being ended by its owner; false when it is not
// alive, with its loss when it was lost.
func (lt *lifetime) beginEnd() (bool, error) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	switch lt.state {
	case alive:
		lt.state = ending
		return true, nil
	case lost:
		return false, lt.err
	}
	return false, nil
}

// finishEnd ends what its owner was ending: given back when end is
// ErrReleased or ErrSessionClosed, else lost with end. It closes the
// stream (waiting while ctx lasts for its reader to return) and cancels
// the context.
func (lt *lifetime) finishEnd(ctx context.Context, end error) {
	lt.mu.Lock()
	lt.err = end
	lt.state = lost
	if end == ErrReleased || end == ErrSessionClosed {
		lt.state = givenBack
	}
	lt.lease.stop()
	lt.mu.Unlock()
	lt.shut(ctx)
	lt.cancel(end)
	lt.detach()
}

// shut closes the stream and waits (while ctx lasts) for the goroutine
// reading it to return.
func (lt *lifetime) shut(ctx context.Context) {
	if lt.closeStream == nil {
		return
	}
	lt.closeStream()
	select {
	case <-lt.followed:
	case <-ctx.Done():
	}
}

// follow reads the stream's events until it ends: `renewed` moves the
// lease's deadline; the last event (`released`, `lost`, `ended`) or a
// broken stream loses it, unless its owner is ending it.
func (lt *lifetime) follow(events *eventReader, body io.Closer) {
	defer close(lt.followed)
	defer body.Close()
	for {
		event, err := events.Next()
		if err != nil {
			lt.lose(ReasonConnectionLost, "", err)
			return
		}
		var news streamNews
		_ = json.Unmarshal([]byte(event.Data), &news)
		if event.Type == "renewed" {
			lt.renewed(news.ExpiresAtMs)
			continue
		}
		reason, last := lastEvents[event.Type]
		if !last {
			continue
		}
		if news.Reason != "" && event.Type != "released" {
			reason = news.Reason
		}
		var cause error
		if reason == ReasonSessionEnded && lt.parent != nil {
			// The session's own stream tells why at the same time; its
			// loss then loses this too, with the session's error.
			cause = lt.parent.awaitEnd(time.Second)
		}
		lt.mu.Lock()
		lt.told = toldEnd{event: event.Type, reason: reason, key: news.Key}
		lt.mu.Unlock()
		lt.lose(reason, news.Key, cause)
		return
	}
}

// awaitEnd waits at most within for it to end, and returns how it ended
// (nil when it has not).
func (lt *lifetime) awaitEnd(within time.Duration) error {
	waitAtMost(context.Background(), lt.ctx.Done(), within)
	return lt.Err()
}

// lastNews is the stream's last event, waited for while ctx lasts and for
// at most within; zero when none came.
func (lt *lifetime) lastNews(ctx context.Context, within time.Duration) toldEnd {
	waitAtMost(ctx, lt.followed, within)
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.told
}

// waitAtMost waits until done is closed, for at most within, while ctx
// lasts.
func waitAtMost(ctx context.Context, done <-chan struct{}, within time.Duration) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
}

// attach makes child, whose parent it is, end with it (a session's lock
// or set); false when it is no longer alive. A child already ended is
// left out.
func (lt *lifetime) attach(child *lifetime) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.state != alive {
		return false
	}
	if child.Err() == nil {
		if lt.dependents == nil {
			lt.dependents = make(map[*lifetime]struct{})
		}
		lt.dependents[child] = struct{}{}
	}
	return true
}

// takeDependents returns its dependents and forgets them.
func (lt *lifetime) takeDependents() []*lifetime {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.takeDependentsLocked()
}

func (lt *lifetime) takeDependentsLocked() []*lifetime {
	taken := make([]*lifetime, 0, len(lt.dependents))
	for dependent := range lt.dependents {
		taken = append(taken, dependent)
	}
	lt.dependents = nil
	return taken
}

// detach takes an ended dependent off its session's list.
func (lt *lifetime) detach() {
	if lt.parent == nil {
		return
	}
	lt.parent.mu.Lock()
	defer lt.parent.mu.Unlock()
	delete(lt.parent.dependents, lt)
}

// lossOf is the reason a lock is lost when the gateway answered err about
// it: `lock-not-found` (it is gone) or `not-owner` (another holds it).
func lossOf(err error) (string, bool) {
	switch {
	case errors.Is(err, ErrLockLost):
		return ReasonLockGone, true
	case errors.Is(err, ErrNotOwner):
		return ReasonHeldByAnother, true
	}
	return "", false
}
