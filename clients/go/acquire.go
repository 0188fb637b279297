// Taking a lock: streamed (Lock, TryLock), held while the response to
// `POST /locks` with `Accept: text/event-stream` stays open, or a plain
// lease (Lease), retried with one Idempotency-Key when its answer is lost;
// and the streamed request read up to its grant (openHeld) that streamed
// locks, batches and sessions share.

package lockgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// leaseRetries is how many times Lease sends its request again after a
// failure that may have hidden a grant.
const leaseRetries = 2

// errIdempotencyStreamed is the answer to IdempotencyKey given to a
// streamed lock.
var errIdempotencyStreamed = fmt.Errorf("%w: IdempotencyKey is for Lease; a streamed lock's grant ends with its connection", ErrInvalidRequest)

// Lock takes key as a streamed lock: the gateway renews its lease every
// TTL/3 for as long as the lock is held, and releases it at once if this
// process goes away. It waits while another owner holds the lock: until
// ctx is done (then it returns ctx.Err()), or for at most the Wait option
// (then an error matching ErrLockHeld, a *Problem).
//
// ctx bounds the acquisition only: the lock stays held until Release, or
// until it is lost, which cancels the lock's Context. Other errors match
// ErrUnavailable (the gateway could not be reached, or cannot serve now)
// or ErrInvalidRequest (an invalid key or option, missing credentials).
func (g *Gateway) Lock(ctx context.Context, key string, options ...LockOption) (*Lock, error) {
	return g.lockWaiting(ctx, key, newLockConfig(options), false)
}

// TryLock takes key as a streamed lock if it is free, and returns an error
// matching ErrLockHeld at once if not. It is Lock with Wait(0).
func (g *Gateway) TryLock(ctx context.Context, key string, options ...LockOption) (*Lock, error) {
	cfg := newLockConfig(options)
	cfg.wait, cfg.waitSet = 0, true
	return g.lockWaiting(ctx, key, cfg, false)
}

// lockWaiting takes a streamed lock, in as many requests as the wait needs
// (the gateway bounds one request's wait). With persist (a campaign), a
// gateway that cannot serve is asked again, with backoff, until ctx is done.
func (g *Gateway) lockWaiting(ctx context.Context, key string, cfg lockConfig, persist bool) (*Lock, error) {
	if cfg.idempotencyKey != "" {
		return nil, errIdempotencyStreamed
	}
	if err := cfg.refuse("it is a session's (Session)", sessionOnly...); err != nil {
		return nil, err
	}
	if err := cfg.refuse("a streamed lock is always a new grant; re-enter a Lease", "Reentry"); err != nil {
		return nil, err
	}
	if cfg.sessionID() != "" {
		if err := cfg.refuse("a lock in a session has the session's lease (SessionTTL)", "TTL"); err != nil {
			return nil, err
		}
	}
	until := time.Now().Add(cfg.wait)
	failures := 0
	for {
		wait := time.Duration(g.maxWait.Load()) * time.Millisecond
		last := false
		if cfg.waitSet {
			if left := time.Until(until); left <= wait {
				wait, last = maxOf(left, 0), true
			}
		}
		started := time.Now()
		lock, err := g.holdStream(ctx, key, cfg, wait)
		var pause time.Duration
		switch {
		case err == nil:
			return lock, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case g.lowerMaxWait(err, wait):
			continue
		case persist && errors.Is(err, ErrUnavailable):
			pause = backoff(failures, 250*time.Millisecond, err)
			failures++
		case !errors.Is(err, ErrLockHeld) || last:
			return nil, err
		default:
			// The wait ran out with the lock still held: ask again, after
			// a pause if waits this short would spin.
			failures = 0
			pause = minOf(time.Second-time.Since(started), retryAfter(err))
		}
		if pause > 0 {
			if err := sleep(ctx, pause); err != nil {
				return nil, err
			}
		}
	}
}

// holdStream makes one streamed request for key and reads it up to its
// grant.
func (g *Gateway) holdStream(ctx context.Context, key string, cfg lockConfig, wait time.Duration) (*Lock, error) {
	var granted grant
	stream, err := g.openHeld(ctx, "/locks", cfg.body(key, wait), wait+g.timeout, "grant", func(events *eventReader) error {
		return awaitGrant(events, "acquired", &granted, cfg.onQueued)
	})
	if err != nil {
		return nil, err
	}
	lock := newLock(ctx, g, granted, cfg, stream.sent, stream.received, stream.close)
	go lock.lifetime.follow(stream.events, stream.body)
	return lock, nil
}

// heldStream is a streamed request that holds what it was granted (a
// lock, a batch, a session) for as long as its answer stays open, read up
// to the grant.
type heldStream struct {
	events *eventReader
	body   io.Closer
	// close ends the connection: the gateway gives back what it holds.
	close context.CancelFunc
	// sent is when the request was sent, received when its grant came.
	sent, received time.Time
}

// openHeld sends a streamed request to path and reads its events up to
// the grant with readGrant, within limit and while ctx lasts; what names
// the grant in errors. A request that failed before anything came back is
// sent once more: nothing can have been granted, as a grant ends with its
// connection.
func (g *Gateway) openHeld(ctx context.Context, path string, body any, limit time.Duration, what string,
	readGrant func(*eventReader) error) (*heldStream, error) {
	stream, unsent, err := g.openHeldOnce(ctx, path, body, limit, what, readGrant)
	if unsent {
		stream, _, err = g.openHeldOnce(ctx, path, body, limit, what, readGrant)
	}
	return stream, err
}

// openHeldOnce is one attempt of openHeld; unsent reports a failure that
// got no answer at all.
func (g *Gateway) openHeldOnce(ctx context.Context, path string, body any, limit time.Duration, what string,
	readGrant func(*eventReader) error) (stream *heldStream, unsent bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	// The stream outlives ctx once granted; until then ctx, and the limit
	// on how long a grant may take, close it (a closed stream holds nothing).
	streamCtx, closeStream := context.WithCancel(detached{ctx})
	guard := guardGrant(ctx, limit, closeStream)
	defer guard.finish()
	// failed is the error to return for a failure to be granted.
	failed := func(err error) error {
		closeStream()
		var problem *Problem
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &problem), errors.Is(err, ErrUnavailable):
			return err
		case guard.timedOut.Load():
			return &unavailableError{message: fmt.Sprintf("no %s from %s within %v", what, g.base, limit), err: err}
		}
		return &unavailableError{message: fmt.Sprintf("the stream from %s ended before the %s", g.base, what), err: err}
	}

	sent := time.Now()
	response, err := g.openStream(streamCtx, http.MethodPost, path, body, nil)
	if err != nil {
		var problem *Problem
		if !errors.As(err, &problem) && !errors.Is(err, ErrUnavailable) && ctx.Err() == nil && !guard.timedOut.Load() {
			closeStream()
			return nil, true, &unavailableError{message: "cannot reach " + g.base, err: err}
		}
		return nil, false, failed(err)
	}
	events := newEventReader(response.Body)
	err = readGrant(events)
	received := time.Now()
	guard.finish()
	if err == nil && (ctx.Err() != nil || guard.timedOut.Load()) {
		err = errors.New("cancelled at the " + what)
	}
	if err != nil {
		response.Body.Close()
		return nil, false, failed(err)
	}
	return &heldStream{events: events, body: response.Body, close: closeStream, sent: sent, received: received}, false, nil
}

// grantGuard closes a streamed request's connection when the caller's
// context ends, or when the grant takes longer than its limit, until
// finish.
type grantGuard struct {
	timer    *time.Timer
	timedOut atomic.Bool
	stop     chan struct{}
	watched  chan struct{}
	once     sync.Once
}

func guardGrant(ctx context.Context, limit time.Duration, closeStream context.CancelFunc) *grantGuard {
	guard := &grantGuard{stop: make(chan struct{}), watched: make(chan struct{})}
	guard.timer = time.AfterFunc(limit, func() {
		guard.timedOut.Store(true)
		closeStream()
	})
	go func() {
		defer close(guard.watched)
		select {
		case <-ctx.Done():
			closeStream()
		case <-guard.stop:
		}
	}()
	return guard
}

// finish ends the guard; once it returns, it closes nothing more.
func (guard *grantGuard) finish() {
	guard.once.Do(func() {
		guard.timer.Stop()
		close(guard.stop)
		<-guard.watched
	})
}

// awaitGrant reads a stream's events up to its grant, the event named
// granted (`acquired`, a session's `opened`), whose data it reads into v:
// `queued` while it waits, or `refused` with a problem document.
func awaitGrant(events *eventReader, granted string, v any, onQueued func(int)) error {
	for {
		event, err := events.Next()
		if err != nil {
			return err
		}
		switch event.Type {
		case granted:
			if err := json.Unmarshal([]byte(event.Data), v); err != nil {
				return &unavailableError{message: "reading the grant", err: err}
			}
			return nil
		case "refused":
			return parseRefusal(http.StatusConflict, nil, []byte(event.Data))
		case "queued":
			var queued struct {
				Position int `json:"position"`
			}
			if onQueued != nil && json.Unmarshal([]byte(event.Data), &queued) == nil {
				onQueued(queued.Position)
			}
		}
	}
}

// Lease takes key as a plain lease (`POST /locks`): nobody renews it but
// its holder, with Extend, before its TTL runs out; its Context is
// cancelled when the lease could have ended without one. Use it when the
// lock must outlive this process's connection; prefer Lock otherwise.
//
// It tries once, or waits up to the Wait option (at most the gateway's
// longest wait, 60 s by default). Its request carries an Idempotency-Key
// (a fresh one, or the IdempotencyKey option's): when the answer is lost
// (a reset connection, a timeout, a 503), it is sent again, and a grant
// the lost answer carried is answered again (Replayed reports it) rather
// than a second grant made. With Reentry it re-enters a lease held with a
// token instead: one more hold, sent once.
func (g *Gateway) Lease(ctx context.Context, key string, options ...LockOption) (*Lock, error) {
	cfg := newLockConfig(options)
	if err := cfg.refuse("it is a session's (Session)", sessionOnly...); err != nil {
		return nil, err
	}
	// The gateway does not renew a lock in a session, nor does Extend: its
	// lease is the session's, which a Lease has no way to follow.
	if err := cfg.refuse("a lock in a session is a streamed lock (Lock, TryLock)", "InSession"); err != nil {
		return nil, err
	}
	request := call{method: http.MethodPost, path: "/locks", body: cfg.body(key, cfg.wait), extra: cfg.wait}
	retries := 0
	if cfg.reentry != "" {
		if err := cfg.refuse("a re-entry repeats nothing", "IdempotencyKey", "Wait"); err != nil {
			return nil, err
		}
	} else {
		idempotencyKey := cfg.idempotencyKey
		if idempotencyKey == "" {
			idempotencyKey = newUUID()
		}
		request.header = http.Header{"Idempotency-Key": {idempotencyKey}}
		retries = leaseRetries
	}
	// A grant answered again was made for the first attempt: its lease is
	// timed from that attempt's sending.
	firstSent := time.Now()
	for attempt := 0; ; attempt++ {
		a, err := g.do(ctx, request)
		if err == nil {
			var granted grant
			if err := decode(a, &granted); err != nil {
				return nil, err
			}
			lock := newLock(ctx, g, granted, cfg, firstSent, time.Now(), nil)
			lock.replayed = a.header.Get("Idempotent-Replayed") == "true"
			return lock, nil
		}
		if attempt >= retries || ctx.Err() != nil || !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		if err := sleep(ctx, backoff(attempt, 100*time.Millisecond, err)); err != nil {
			return nil, err
		}
	}
}

// lowerMaxWait learns, from a refusal of wait_ms, the gateway's longest
// wait; true when it is shorter than the one asked for (ask again).
func (g *Gateway) lowerMaxWait(err error, asked time.Duration) bool {
	var problem *Problem
	var field string
	var maximum int64
	if !errors.As(err, &problem) || problem.Slug() != "invalid-field" ||
		!problem.Member("field", &field) || field != "wait_ms" || !problem.Member("maximum", &maximum) {
		return false
	}
	if time.Duration(maximum)*time.Millisecond >= asked {
		return false
	}
	g.maxWait.Store(maximum)
	return true
}

// retryAfter is the problem's RetryAfter, or a second.
func retryAfter(err error) time.Duration {
	var problem *Problem
	if errors.As(err, &problem) && problem.RetryAfter > 0 {
		return problem.RetryAfter
	}
	return time.Second
}

func maxOf[T int | int64 | time.Duration](a, b T) T {
	if a > b {
		return a
	}
	return b
}
