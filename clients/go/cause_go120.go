// The lock's context on Go 1.20 and later: cancelled with its cause, so
// that context.Cause(lock.Context()) says why the lock ended.

//go:build go1.20

package lockgate

import "context"

// withEndCause returns a context and the function that cancels it with a
// cause (*LostError, ErrReleased) that context.Cause reports.
func withEndCause(parent context.Context) (context.Context, func(cause error)) {
	return context.WithCancelCause(parent)
}
