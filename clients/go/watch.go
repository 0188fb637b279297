// Watching a lock without holding it: `GET /locks/{key}/events` as a
// channel, reconnecting with Last-Event-ID after a dropped connection.

package lockgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// EventType names a watched lock's event.
type EventType string

// The events of a watched lock.
const (
	// EventSnapshot is the lock's state (WatchEvent.Snapshot); always first,
	// and again after EventGap.
	EventSnapshot EventType = "snapshot"
	// EventAcquired: a holder was granted the lock.
	EventAcquired EventType = "acquired"
	// EventValue: a holder replaced its public value.
	EventValue EventType = "value"
	// EventMode: a holder upgraded or downgraded its hold (WatchEvent.Mode,
	// and FencingToken, new after an upgrade).
	EventMode EventType = "mode"
	// EventReleased: the hold with this fencing token was released.
	EventReleased EventType = "released"
	// EventExpired: the hold's lease ran out (told at most 1 s after).
	EventExpired EventType = "expired"
	// EventRevoked: an operator revoked the hold.
	EventRevoked EventType = "revoked"
	// EventGap: the events after the resumed id are no longer kept; a
	// snapshot follows.
	EventGap EventType = "gap"
	// EventDelayed: a lock-delay keeps the lock free of holders until
	// WatchEvent.DelayedUntil.
	EventDelayed EventType = "delayed"
)

// WatchEvent is one event of a watched lock. Fields an event type does not
// carry are zero. Times are by the Redis server's clock.
type WatchEvent struct {
	Type EventType
	// ID is what a watch resumes after (LastEventID).
	ID           string
	Key          string
	FencingToken uint64
	// Value is the holder's public value (acquired, value).
	Value string
	// Mode is "exclusive", "shared", or "counted" for a counting lock (acquired).
	Mode         string
	ExpiresAt    time.Time
	DelayedUntil time.Time
	// Snapshot is the lock's state (snapshot).
	Snapshot *LockStatus
	// Data is the event's JSON as the gateway sent it.
	Data json.RawMessage
	// Err is set on the last event of a watch that ended with an error (a
	// refusal when it reconnected: revoked credentials, say); its other
	// fields are zero.
	Err error
}

// defaultIdleTimeout: three of the gateway's 15 s keep-alives.
const defaultIdleTimeout = 45 * time.Second

// Watch follows key's events (`GET /locks/{key}/events`) on the returned
// channel: a snapshot first, then every change. It connects before it
// returns, so a refusal (an invalid key, missing credentials) or an
// unreachable gateway is its error. Afterwards a dropped or silent
// connection is made again, with backoff, for as long as ctx lasts,
// resuming after the last event (Last-Event-ID), so that no event is
// missed or told twice. The channel is closed when ctx is done, or after an
// event with Err when a reconnection is refused. Read it promptly: the
// watch waits for its reader.
func (g *Gateway) Watch(ctx context.Context, key string, options ...WatchOption) (<-chan WatchEvent, error) {
	cfg := watchConfig{idleTimeout: defaultIdleTimeout}
	for _, option := range options {
		option(&cfg)
	}
	w := &watch{gw: g, key: key, lastID: cfg.lastEventID, idle: cfg.idleTimeout, retry: 100 * time.Millisecond}
	conn, err := w.connect(ctx)
	if err != nil {
		return nil, err
	}
	events := make(chan WatchEvent)
	go w.run(ctx, conn, events)
	return events, nil
}

type watch struct {
	gw     *Gateway
	key    string
	lastID string
	idle   time.Duration
	// retry is the stream's `retry` (the WHATWG reconnection time): the
	// base of the pause before a reconnection.
	retry time.Duration
}

// watchConnection is one connection of a watch.
type watchConnection struct {
	events *eventReader
	body   io.Closer
	close  context.CancelFunc
	idle   *time.Timer
}

func (c *watchConnection) shut() {
	c.idle.Stop()
	c.close()
	c.body.Close()
}

// connect opens the event stream, resuming after lastID.
func (w *watch) connect(ctx context.Context) (*watchConnection, error) {
	connCtx, cancel := context.WithCancel(ctx)
	header := http.Header{}
	if w.lastID != "" {
		header.Set("Last-Event-ID", w.lastID)
	}
	// The head must come within the gateway's timeout; the body may then
	// stay quiet up to the idle timeout.
	head := time.AfterFunc(w.gw.timeout, cancel)
	response, err := w.gw.openStream(connCtx, http.MethodGet, lockPath(w.key, "/events"), nil, header)
	inTime := head.Stop()
	if err == nil && !inTime {
		response.Body.Close()
		err = errors.New("the answer came too late")
	}
	if err != nil {
		cancel()
		var problem *Problem
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &problem), errors.Is(err, ErrUnavailable):
			return nil, err
		case !inTime:
			return nil, &unavailableError{message: fmt.Sprintf("no answer from %s within %v", w.gw.base, w.gw.timeout), err: err}
		}
		return nil, &unavailableError{message: "cannot reach " + w.gw.base, err: err}
	}
	idle := time.AfterFunc(w.idle, cancel)
	events := newEventReader(&idleReader{source: response.Body, timer: idle, idle: w.idle})
	// The stream's last event ID carries over from the connections before.
	events.idBuffer, events.lastEventID = w.lastID, w.lastID
	return &watchConnection{events: events, body: response.Body, close: cancel, idle: idle}, nil
}

// run hands out the events of conn, and of each connection after it.
func (w *watch) run(ctx context.Context, conn *watchConnection, out chan<- WatchEvent) {
	defer close(out)
	failures := 0
	for {
		delivered, err := w.pump(ctx, conn, out)
		conn.shut()
		if ctx.Err() != nil {
			return
		}
		if delivered {
			failures = 0
		}
		if retry := conn.events.Retry(); retry > 0 {
			w.retry = retry
		}
		for {
			if sleep(ctx, backoff(failures, w.retry, err)) != nil {
				return
			}
			failures++
			conn, err = w.connect(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, ErrUnavailable) {
				select {
				case out <- WatchEvent{Err: err}:
				case <-ctx.Done():
				}
				return
			}
		}
	}
}

// pump hands out one connection's events until it ends; delivered reports
// whether any came.
func (w *watch) pump(ctx context.Context, conn *watchConnection, out chan<- WatchEvent) (delivered bool, err error) {
	for {
		event, err := conn.events.Next()
		w.lastID = conn.events.LastEventID()
		if err != nil {
			return delivered, err
		}
		select {
		case out <- watchEvent(event):
			delivered = true
			// Time spent waiting for the reader is not the stream's silence.
			conn.idle.Reset(w.idle)
		case <-ctx.Done():
			return delivered, ctx.Err()
		}
	}
}

// watchEvent reads a watch's event.
func watchEvent(event serverEvent) WatchEvent {
	we := WatchEvent{Type: EventType(event.Type), ID: event.ID, Data: json.RawMessage(event.Data)}
	if we.Type == EventSnapshot {
		if status, err := parseLockStatus(we.Data); err == nil {
			we.Snapshot = status
			we.Key = status.Key
		}
		return we
	}
	var data struct {
		Key            string  `json:"key"`
		FencingToken   uint64  `json:"fencing_token"`
		Value          *string `json:"value"`
		Mode           string  `json:"mode"`
		ExpiresAtMs    int64   `json:"expires_at_ms"`
		DelayedUntilMs int64   `json:"delayed_until_ms"`
	}
	if json.Unmarshal(we.Data, &data) == nil {
		we.Key, we.FencingToken, we.Value, we.Mode = data.Key, data.FencingToken, text(data.Value), data.Mode
		we.ExpiresAt, we.DelayedUntil = unixMilli(data.ExpiresAtMs), unixMilli(data.DelayedUntilMs)
	}
	return we
}

// idleReader restarts timer on every read that brings bytes: the timer
// closes a connection that has been silent too long.
type idleReader struct {
	source io.Reader
	timer  *time.Timer
	idle   time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.source.Read(p)
	if n > 0 {
		r.timer.Reset(r.idle)
	}
	return n, err
}
