// The lock's context on Go 1.19, which has no context.Cause: the cause is
// kept by the lock alone (Lock.Err).

//go:build !go1.20

package lockgate

import "context"

// withEndCause returns a context and the function that cancels it; the
// cause is kept by the caller (Lock.Err), as Go 1.19 contexts have none.
func withEndCause(parent context.Context) (context.Context, func(cause error)) {
	ctx, cancel := context.WithCancel(parent)
	return ctx, func(error) { cancel() }
}
