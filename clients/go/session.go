// Session: one liveness lease for many locks, as in etcd's
// concurrency.Session. A streamed `POST /sessions` that the gateway keeps
// alive while the response stays open; the locks taken through it are
// streamed locks with "session", and when the session ends, so do they.

package lockgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
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
	// lifetime: Context, Done, Err, TTL, ExpiresAt and Remaining; every
	// lock and set taken through the session ends with it.
	*lifetime
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
	var opened sessionGrant
	stream, err := g.openHeld(ctx, "/sessions", body, g.timeout, "session", func(events *eventReader) error {
		if err := awaitGrant(events, "opened", &opened, nil); err != nil {
			return err
		}
		if opened.ID == "" {
			return &unavailableError{message: "reading the opened session: it has no id"}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s := &Session{gw: g, id: opened.ID, lockDelay: time.Duration(opened.LockDelayMs) * time.Millisecond}
	lease := newLeaseClock(time.Duration(opened.TTLMs)*time.Millisecond, opened.ExpiresAtMs, stream.sent, stream.received, 0)
	s.lifetime = newLifetime(ctx, lease, stream.close, func(reason, _ string, cause error) error {
		return &SessionLostError{Reason: reason, Err: cause}
	})
	s.lifetime.keepTime()
	go s.lifetime.follow(stream.events, stream.body)
	return s, nil
}

// ID is the session's id: a secret like a lock's token. Whoever has it can
// attach locks to the session (InSession) and end it. Never log it; the
// Session's String leaves it out.
func (s *Session) ID() string { return s.id }

// LockDelay is how long its locks stay free after it expires.
func (s *Session) LockDelay() time.Duration { return s.lockDelay }

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
		case <-s.Done():
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
	if err := s.adopt(lock.lifetime); err != nil {
		return nil, err
	}
	return lock, nil
}

// ended is nil while the session lasts, else an error matching
// ErrSessionNotFound that says how it ended.
func (s *Session) ended() error {
	switch state, err := s.lifetime.current(); state {
	case alive:
		return nil
	case lost:
		return err
	}
	return fmt.Errorf("%w: the session was closed", ErrSessionNotFound)
}

// adopt makes a new lock or set of the session end with it; when the
// session ended before it was granted, it ends the newcomer at once and
// says how the session ended.
func (s *Session) adopt(child *lifetime) error {
	if s.lifetime.attach(child) {
		return nil
	}
	err := s.ended()
	child.lose(ReasonSessionEnded, "", err)
	child.shut(context.Background())
	return err
}

// Close ends the session (`DELETE /sessions/{id}`): every lock and set
// taken through it is released at once, without lock-delay, and their
// Context cancelled (Err: ErrReleased); then the stream is closed. The
// session's Context is cancelled and Err returns ErrSessionClosed. It is
// safe to defer, and to call more than once (later calls return what the
// first did).
//
// It returns nil when it ended the session; the *SessionLostError when the
// session had been lost (its locks are then lost too, ReasonSessionEnded);
// or an error matching ErrUnavailable when the gateway could not confirm
// it, in which case the closed stream ends the session, and the closed
// streams of its locks release them.
func (s *Session) Close(ctx context.Context) error {
	return s.lifetime.end(ctx, func() error { return s.close(ctx) })
}

func (s *Session) close(ctx context.Context) error {
	// From here on the news that its locks' session ended is Close's own.
	var releasing []*lifetime
	for _, child := range s.lifetime.takeDependents() {
		if ok, _ := child.beginEnd(); ok {
			releasing = append(releasing, child)
		}
	}

	_, err := s.gw.do(ctx, call{method: http.MethodDelete, path: "/sessions/" + url.PathEscape(s.id)})
	var end error = ErrSessionClosed
	switch {
	case errors.Is(err, ErrSessionNotFound):
		end = &SessionLostError{Reason: s.goneReason(ctx), Err: err}
		err = end
	case err != nil:
		err = fmt.Errorf("lockgate: the end of the session was not confirmed (it ends when its stream closes or its lease runs out): %w", err)
	}
	s.lifetime.finishEnd(ctx, end)
	for _, child := range releasing {
		childEnd := ErrReleased
		if end != ErrSessionClosed {
			childEnd = child.lostError(ReasonSessionEnded, "", end)
		}
		child.finishEnd(ctx, childEnd)
	}
	return err
}

// goneReason is why the session ended before Close could end it: the
// gateway's `ended` reason, which comes on the stream right after (waited
// for while ctx lasts, a second at most), or "session-not-found".
func (s *Session) goneReason(ctx context.Context) string {
	if told := s.lifetime.lastNews(ctx, time.Second); told.event == "ended" {
		return told.reason
	}
	return "session-not-found"
}
