// Session: one liveness lease for many locks, as in etcd's
// concurrency.Session. A streamed `POST /sessions` that the gateway keeps
// alive while the response stays open; the locks taken through it are
// streamed locks with "session", and when the session ends, so do they.

package lockgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

type sessionState int

const (
	sessionOpen sessionState = iota
	sessionClosing
	sessionClosed
	sessionLost
)

// sessionGrant is a `201` answer to `POST /sessions`, and a streamed
// session's `opened` event.
type sessionGrant struct {
	ID          string `json:"id"`
	TTLMs       int64  `json:"ttl_ms"`
	LockDelayMs int64  `json:"lock_delay_ms"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
}

// sessionBody is the JSON body of `POST /sessions`.
type sessionBody struct {
	TTLMs       int64   `json:"ttl_ms,omitempty"`
	LockDelayMs *int64  `json:"lock_delay_ms,omitempty"`
	Value       *string `json:"value,omitempty"`
}

// Session is one liveness lease that any number of locks hang on: one
// keepalive keeps them all, and when the session ends its locks end with
// it. The gateway keeps it alive while its stream stays open; its Context
// is cancelled once it is lost (its stream broke, it expired, someone
// deleted it, the gateway shut down, or no keepalive came before its lease
// could have ended by this process's clock), and then the Context of every
// lock taken through it too. A Session is safe for use by many goroutines.
// Close it when done: that releases its locks at once.
type Session struct {
	gw        *Gateway
	id        string
	lockDelay time.Duration

	ctx    context.Context
	cancel func(cause error)

	// closeStream ends the session's connection (which makes the gateway
	// end the session); followed is closed when the goroutine reading its
	// events has returned.
	closeStream context.CancelFunc
	followed    chan struct{}

	mu    sync.Mutex
	state sessionState
	err   error
	lease leaseClock
	// endedReason is the gateway's `ended` reason, once told.
	endedReason string
	// locks are the held locks taken through the session.
	locks map[*Lock]struct{}

	closeOnce sync.Once
	closeErr  error
}

// Session opens a session (a streamed `POST /sessions`): its lease is
// SessionTTL (default 10 s), renewed by the gateway every third of it
// while the session lasts. LockDelay keeps its locks free for that long
// after it expires; Value is a public string shown with it. Other options
// are refused (ErrInvalidRequest).
//
// ctx bounds the opening only; the session lasts until Close, or until it
// is lost, which cancels its Context. Errors match ErrUnavailable (the
// gateway could not be reached, or cannot serve now) or ErrInvalidRequest.
func (g *Gateway) Session(ctx context.Context, options ...LockOption) (*Session, error) {
	cfg := newLockConfig(options)
	if err := cfg.refuse("it is a lock's, not a session's", lockOnly...); err != nil {
		return nil, err
	}
	body := sessionBody{TTLMs: millis(cfg.sessionTTL), Value: cfg.value}
	if cfg.lockDelay != nil {
		delay := millis(*cfg.lockDelay)
		body.LockDelayMs = &delay
	}
	s, unsent, err := g.openSession(ctx, body)
	if unsent {
		// A pooled connection the gateway had closed: nothing was opened.
		s, _, err = g.openSession(ctx, body)
	}
	return s, err
}

// openSession makes one streamed `POST /sessions` and reads it up to
// `opened`. unsent reports a failure that got no answer at all.
func (g *Gateway) openSession(ctx context.Context, body sessionBody) (s *Session, unsent bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	// The stream outlives ctx once opened; until then ctx and the timeout
	// close it (a closed stream leaves no session behind).
	streamCtx, closeStream := context.WithCancel(detached{ctx})
	guard := guardGrant(ctx, g.timeout, closeStream)
	defer guard.finish()
	failed := func(err error) error {
		closeStream()
		var problem *Problem
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &problem), errors.Is(err, ErrUnavailable):
			return err
		case guard.timedOut.Load():
			return &unavailableError{message: fmt.Sprintf("no session from %s within %v", g.base, g.timeout), err: err}
		}
		return &unavailableError{message: "the session's stream from " + g.base + " ended before it opened", err: err}
	}

	sent := time.Now()
	response, err := g.openStream(streamCtx, http.MethodPost, "/sessions", body, nil)
	if err != nil {
		var problem *Problem
		if !errors.As(err, &problem) && !errors.Is(err, ErrUnavailable) && ctx.Err() == nil && !guard.timedOut.Load() {
			closeStream()
			return nil, true, &unavailableError{message: "cannot reach " + g.base, err: err}
		}
		return nil, false, failed(err)
	}
	events := newEventReader(response.Body)
	opened, err := awaitOpened(events)
	received := time.Now()
	guard.finish()
	if err == nil && (ctx.Err() != nil || guard.timedOut.Load()) {
		err = errors.New("cancelled at the opening")
	}
	if err != nil {
		response.Body.Close()
		return nil, false, failed(err)
	}
	s = &Session{
		gw:          g,
		id:          opened.ID,
		lockDelay:   time.Duration(opened.LockDelayMs) * time.Millisecond,
		closeStream: closeStream,
		followed:    make(chan struct{}),
		lease:       newLeaseClock(time.Duration(opened.TTLMs)*time.Millisecond, opened.ExpiresAtMs, sent, received, 0),
		locks:       make(map[*Lock]struct{}),
	}
	s.ctx, s.cancel = withEndCause(detached{ctx})
	s.mu.Lock()
	s.lease.start(s.onDeadline)
	s.mu.Unlock()
	go s.follow(events, response.Body)
	return s, false, nil
}

// awaitOpened reads a streamed session's first event, `opened`.
func awaitOpened(events *eventReader) (sessionGrant, error) {
	for {
		event, err := events.Next()
		if err != nil {
			return sessionGrant{}, err
		}
		if event.Type == "opened" {
			var opened sessionGrant
			if err := json.Unmarshal([]byte(event.Data), &opened); err != nil || opened.ID == "" {
				return sessionGrant{}, &unavailableError{message: "reading the opened session", err: err}
			}
			return opened, nil
		}
	}
}

// ID is the session's id: a secret like a lock's token. Whoever has it can
// attach locks to the session (InSession) and end it. Never log it; the
// Session's String leaves it out.
func (s *Session) ID() string { return s.id }

// TTL is the session's lease length.
func (s *Session) TTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease.ttl
}

// LockDelay is how long its locks stay free after it expires.
func (s *Session) LockDelay() time.Duration { return s.lockDelay }

// ExpiresAt is when the session's lease ends by the Redis server's clock,
// as the gateway last reported it (the opening, the last keepalive).
func (s *Session) ExpiresAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.UnixMilli(s.lease.expiresAtMs)
}

// Remaining is how long the session is sure to last, by this process's
// clock, unless a keepalive comes first; 0 once it has ended.
func (s *Session) Remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != sessionOpen {
		return 0
	}
	return s.lease.remaining()
}

// Context is cancelled once the session is lost or closed, after which the
// Context of every lock taken through it is too. It carries the values of
// the context the session was opened with, but not its cancellation. On Go
// 1.20 and later context.Cause(session.Context()) is what Err returns.
func (s *Session) Context() context.Context { return s.ctx }

// Done is Context().Done().
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err is nil while the session lasts; ErrSessionClosed once Close ended
// it; and once it was lost, a *SessionLostError (errors.Is(err,
// ErrSessionNotFound)) whose Reason says why.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Session) String() string {
	return fmt.Sprintf("lockgate.Session(ttl %v)", s.TTL())
}

// GoString keeps the id out of %#v as well.
func (s *Session) GoString() string { return s.String() }

// Lock takes key as a streamed lock hanging on the session: it lives as
// long as the session (its lease is the session's; TTL is refused) unless
// released first, and its Context is cancelled when the session ends
// (ReasonSessionEnded). The options and errors are Gateway.Lock's; a wait
// by a session that holds other locks can close a cycle with other
// sessions, refused with a *DeadlockError (ErrDeadlock). The wait ends
// when the session does, with the session's error (ErrSessionNotFound).
func (s *Session) Lock(ctx context.Context, key string, options ...LockOption) (*Lock, error) {
	return s.lock(ctx, key, newLockConfig(options))
}

// TryLock takes key as a streamed lock hanging on the session if it is
// free, and returns an error matching ErrLockHeld at once if not.
func (s *Session) TryLock(ctx context.Context, key string, options ...LockOption) (*Lock, error) {
	cfg := newLockConfig(options)
	cfg.wait, cfg.waitSet = 0, true
	return s.lock(ctx, key, cfg)
}

func (s *Session) lock(ctx context.Context, key string, cfg lockConfig) (*Lock, error) {
	if err := cfg.refuse("the lock is in this session", "InSession"); err != nil {
		return nil, err
	}
	if err := s.ended(); err != nil {
		return nil, err
	}
	cfg.session = s
	// Waiting for a lock on a session that is gone would be in vain.
	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-s.ctx.Done():
			stop()
		case <-waitCtx.Done():
		}
	}()
	lock, err := s.gw.lockWaiting(waitCtx, key, cfg, false)
	if err != nil {
		if ctx.Err() == nil && s.ended() != nil {
			return nil, s.ended()
		}
		return nil, err
	}
	if err := s.attach(lock); err != nil {
		lock.lose(ReasonSessionEnded, err)
		lock.shut(context.Background())
		return nil, err
	}
	return lock, nil
}

// ended is nil while the session lasts, else an error matching
// ErrSessionNotFound that says how it ended.
func (s *Session) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case sessionOpen:
		return nil
	case sessionLost:
		return s.err
	}
	return fmt.Errorf("%w: the session was closed", ErrSessionNotFound)
}

// attach lists a new lock of the session, so that the session's end ends
// it; an error when the session ended before it was granted.
func (s *Session) attach(lock *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != sessionOpen {
		err := s.err
		if err == nil {
			err = fmt.Errorf("%w: the session was closed", ErrSessionNotFound)
		}
		return err
	}
	// A lock lost on its way here has already been forgotten.
	if lock.Err() == nil {
		s.locks[lock] = struct{}{}
	}
	return nil
}

// forget takes an ended lock off the list.
func (s *Session) forget(lock *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locks, lock)
}

// Close ends the session (`DELETE /sessions/{id}`): every lock taken
// through it is released at once, without lock-delay, and their Context
// cancelled (Err: ErrReleased); then the stream is closed. The session's
// Context is cancelled and Err returns ErrSessionClosed. It is safe to
// defer, and to call more than once (later calls return what the first
// did).
//
// It returns nil when it ended the session; the *SessionLostError when the
// session had been lost (its locks are then lost too, ReasonSessionEnded);
// or an error matching ErrUnavailable when the gateway could not confirm
// it, in which case the closed stream ends the session, and the closed
// streams of its locks release them.
func (s *Session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Session) close(ctx context.Context) error {
	s.mu.Lock()
	if s.state == sessionLost {
		err := s.err
		s.mu.Unlock()
		s.shut(ctx)
		return err
	}
	s.state = sessionClosing
	var ending []*Lock
	for lock := range s.locks {
		ending = append(ending, lock)
	}
	s.mu.Unlock()
	// From here on the news that the locks' session ended is Close's own.
	var releasing []*Lock
	for _, lock := range ending {
		if ok, _ := lock.beginRelease(); ok {
			releasing = append(releasing, lock)
		}
	}

	_, err := s.gw.do(ctx, call{method: http.MethodDelete, path: "/sessions/" + url.PathEscape(s.id)})
	var end error = ErrSessionClosed
	switch {
	case errors.Is(err, ErrSessionNotFound):
		end = &SessionLostError{Reason: s.goneReason(ctx), Err: err}
	case err != nil:
		err = fmt.Errorf("lockgate: the end of the session was not confirmed (it ends when its stream closes or its lease runs out): %w", err)
	}
	s.mu.Lock()
	s.err = end
	if end == ErrSessionClosed {
		s.state = sessionClosed
	} else {
		s.state = sessionLost
		err = end
	}
	s.lease.stop()
	s.mu.Unlock()
	s.shut(ctx)
	s.cancel(end)
	lockEnd := ErrReleased
	for _, lock := range releasing {
		if end != ErrSessionClosed {
			lockEnd = &LostError{Key: lock.key, Reason: ReasonSessionEnded, Err: end}
		}
		lock.finishRelease(ctx, lockEnd)
	}
	return err
}

// goneReason is why the session ended before Close could end it: the
// gateway's `ended` reason, which comes on the stream right after (waited
// for while ctx lasts, a second at most), or "session-not-found".
func (s *Session) goneReason(ctx context.Context) string {
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	select {
	case <-s.followed:
	case <-timer.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endedReason != "" {
		return s.endedReason
	}
	return "session-not-found"
}

// shut closes the session's connection and waits (while ctx lasts) for
// the goroutine reading it to return.
func (s *Session) shut(ctx context.Context) {
	s.closeStream()
	select {
	case <-s.followed:
	case <-ctx.Done():
	}
}

// lose marks the session lost (once), closes its stream, cancels its
// context with the *SessionLostError, and then loses each of its locks.
// While it is being closed, Close decides how it ended.
func (s *Session) lose(reason string, cause error) {
	s.mu.Lock()
	if s.state != sessionOpen {
		s.mu.Unlock()
		return
	}
	err := &SessionLostError{Reason: reason, Err: cause}
	s.state = sessionLost
	s.err = err
	s.lease.stop()
	locks := make([]*Lock, 0, len(s.locks))
	for lock := range s.locks {
		locks = append(locks, lock)
	}
	s.mu.Unlock()
	s.closeStream()
	s.cancel(err)
	for _, lock := range locks {
		lock.lose(ReasonSessionEnded, err)
	}
}

// onDeadline runs when the session's lease could have ended: it is lost
// unless a keepalive moved the deadline meanwhile.
func (s *Session) onDeadline() {
	s.mu.Lock()
	due := s.state == sessionOpen && s.lease.due()
	s.mu.Unlock()
	if due {
		s.lose(ReasonLeaseExpired, nil)
	}
}

// follow reads the session's events until its stream ends, and turns that
// end into the session's loss (unless Close ended it).
func (s *Session) follow(events *eventReader, body io.Closer) {
	defer close(s.followed)
	defer body.Close()
	for {
		event, err := events.Next()
		if err != nil {
			s.lose(ReasonConnectionLost, err)
			return
		}
		switch event.Type {
		case "renewed":
			var renewal struct {
				ExpiresAtMs int64 `json:"expires_at_ms"`
			}
			if json.Unmarshal([]byte(event.Data), &renewal) == nil {
				s.mu.Lock()
				if s.state == sessionOpen {
					s.lease.renewed(renewal.ExpiresAtMs)
				}
				s.mu.Unlock()
			}
		case "ended":
			var ended struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal([]byte(event.Data), &ended)
			if ended.Reason == "" {
				ended.Reason = ReasonSessionExpired
			}
			s.mu.Lock()
			s.endedReason = ended.Reason
			s.mu.Unlock()
			// Our own Close's DELETE ends the stream this way too; then
			// the close is under way and lose does nothing.
			s.lose(ended.Reason, nil)
			return
		}
	}
}
