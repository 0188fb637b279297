// leaseClock: a lease's end (by the Redis server's clock, as the gateway
// reports it) mapped to this process's monotonic clock, never later than
// the real end, with a timer for the moment it could have passed. Locks
// and sessions keep one each.

package lockgate

import "time"

// leaseClock is a lease as this process times it. Its owner guards it with
// its own mutex; fire (the owner's) runs on the timer's goroutine.
type leaseClock struct {
	ttl time.Duration
	// expiresAtMs is the lease's end by the Redis clock, as last reported.
	expiresAtMs int64
	// anchor and grantedAtMs map the gateway's lease ends to this
	// process's clock: the lease was granted at grantedAtMs by Redis, and
	// no earlier than anchor here.
	anchor      time.Time
	grantedAtMs int64
	// deadline is the earliest moment, here, at which the lease could end
	// unless a renewal comes first.
	deadline time.Time
	timer    *time.Timer
	fire     func()
}

// newLeaseClock times a lease granted for ttl until expiresAtMs by a
// request sent at sent, answered at received, that waited waited on the
// gateway: the grant was made no earlier than sent plus waited, and no
// later than received, so the deadline is timed from the earlier of the
// two and never falls after the real end.
func newLeaseClock(ttl time.Duration, expiresAtMs int64, sent, received time.Time, waited time.Duration) leaseClock {
	c := leaseClock{
		ttl:         ttl,
		expiresAtMs: expiresAtMs,
		grantedAtMs: expiresAtMs - ttl.Milliseconds(),
		anchor:      sent.Add(waited),
	}
	if received.Before(c.anchor) {
		c.anchor = received
	}
	c.deadline = c.anchor.Add(ttl)
	return c
}

// start arms the timer: fire runs once the deadline could have passed (and
// again after each re-arm; it should call due).
func (c *leaseClock) start(fire func()) {
	c.fire = fire
	c.arm()
}

func (c *leaseClock) arm() {
	if c.fire == nil {
		return
	}
	wait := time.Until(c.deadline) + time.Millisecond
	if c.timer == nil {
		c.timer = time.AfterFunc(wait, c.fire)
	} else {
		c.timer.Reset(wait)
	}
}

func (c *leaseClock) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// due reports whether the deadline has passed; if not (a renewal moved
// it since the timer was set), it re-arms the timer.
func (c *leaseClock) due() bool {
	if time.Now().Before(c.deadline) {
		c.arm()
		return false
	}
	return true
}

// renewed moves the deadline after a renewal that reported expiresAtMs.
// The renewal was made before now, so its lease ends by now + TTL at the
// latest; mapped through the grant, the Redis clock may place it earlier
// still.
func (c *leaseClock) renewed(expiresAtMs int64) {
	now := time.Now()
	c.expiresAtMs = expiresAtMs
	end := c.anchor.Add(time.Duration(expiresAtMs-c.grantedAtMs) * time.Millisecond)
	if latest := now.Add(c.ttl); latest.Before(end) {
		end = latest
	}
	if end.After(c.deadline) {
		c.deadline = end
		c.arm()
	}
}

// extended sets a new lease of ttl, until expiresAtMs, made by a request
// sent at sent: it took effect after the sending, so it ends no earlier
// than that plus ttl.
func (c *leaseClock) extended(ttl time.Duration, expiresAtMs int64, sent time.Time) {
	c.ttl = ttl
	c.expiresAtMs = expiresAtMs
	c.deadline = sent.Add(ttl)
	c.arm()
}

// remaining is how long the lease is sure to last, here.
func (c *leaseClock) remaining() time.Duration {
	if left := time.Until(c.deadline); left > 0 {
		return left
	}
	return 0
}
