// Unit tests of reading the gateway's answers: problem documents mapped to
// the sentinel errors, and fencing tokens read exactly.

package lockgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestProblemsMatchTheSentinelOfTheirSlug(t *testing.T) {
	cases := []struct {
		status int
		slug   string
		want   error
	}{
		{409, "lock-held", ErrLockHeld},
		{409, "not-owner", ErrNotOwner},
		{404, "lock-not-found", ErrLockLost},
		{409, "deadlock", ErrDeadlock},
		{404, "session-not-found", ErrSessionNotFound},
		{503, "backend-unavailable", ErrUnavailable},
		{503, "shutting-down", ErrUnavailable},
		{429, "rate-limited", ErrUnavailable},
		{422, "invalid-key", ErrInvalidRequest},
		{401, "unauthorized", ErrInvalidRequest},
		// Slugs this client does not know go by their status.
		{418, "some-new-refusal", ErrInvalidRequest},
		{507, "some-new-failure", ErrUnavailable},
	}
	sentinels := []error{ErrLockHeld, ErrNotOwner, ErrLockLost, ErrDeadlock, ErrSessionNotFound, ErrUnavailable, ErrInvalidRequest}
	for _, c := range cases {
		body := fmt.Sprintf(`{"type":"/problems/%s","title":"T","status":%d}`, c.slug, c.status)
		err := fmt.Errorf("wrapped: %w", parseProblem(c.status, nil, []byte(body)))
		for _, sentinel := range sentinels {
			if errors.Is(err, sentinel) != (sentinel == c.want) {
				t.Errorf("%s: errors.Is(%v) = %v", c.slug, sentinel, errors.Is(err, sentinel))
			}
		}
		var problem *Problem
		if !errors.As(err, &problem) || problem.Slug() != c.slug {
			t.Errorf("%s: As %+v", c.slug, problem)
		}
	}
}

func TestAProblemKeepsEveryMember(t *testing.T) {
	body := `{"type":"/problems/lock-held","title":"Lock is held","status":409,
		"detail":"orders:42 is held by another owner","key":"orders:42","retry_after_ms":1834,
		"cycle":["a","b"],"big":18446744073709551615}`
	p := parseProblem(409, http.Header{"Retry-After": {"2"}}, []byte(body))
	if p.Title != "Lock is held" || p.Detail != "orders:42 is held by another owner" || p.Key != "orders:42" ||
		p.RetryAfter != 1834*time.Millisecond || p.Status != 409 {
		t.Fatalf("%+v", p)
	}
	var cycle []string
	var big uint64
	if !p.Member("cycle", &cycle) || len(cycle) != 2 || !p.Member("big", &big) || big != 18446744073709551615 {
		t.Fatalf("extra members %q", p.Extra)
	}
	if _, ok := p.Extra["title"]; ok {
		t.Fatal("a standard member is left in Extra")
	}
	want := "lockgate: Lock is held: orders:42 is held by another owner (lock-held, 409)"
	if p.Error() != want {
		t.Fatalf("%q", p.Error())
	}
}

func TestAnAnswerThatIsNotAProblemIsDescribedByItsStatus(t *testing.T) {
	p := parseProblem(502, http.Header{"Retry-After": {"3"}}, []byte("<html>Bad Gateway</html>"))
	if p.Type != "about:blank" || p.Status != 502 || p.Title != "Bad Gateway" || p.Detail != "<html>Bad Gateway</html>" ||
		p.RetryAfter != 3*time.Second || !errors.Is(p, ErrUnavailable) || p.Slug() != "" {
		t.Fatalf("%+v", p)
	}
}

func TestFencingTokensAreReadExactly(t *testing.T) {
	// Past 2^53 a float64 cannot tell these apart.
	var a, b grant
	if err := json.Unmarshal([]byte(`{"fencing_token":9007199254740993}`), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"fencing_token":9007199254740992}`), &b); err != nil {
		t.Fatal(err)
	}
	if a.FencingToken != 9007199254740993 || a.FencingToken == b.FencingToken {
		t.Fatalf("%d, %d", a.FencingToken, b.FencingToken)
	}
	status, err := parseLockStatus([]byte(`{"key":"k","held":true,"fencing_token":18446744073709551615,
		"leases":[{"fencing_token":18446744073709551614,"value":null,"holds":1,"acquired_at_ms":1,"expires_at_ms":2}]}`))
	if err != nil || status.FencingToken != 18446744073709551615 || status.Leases[0].FencingToken != 18446744073709551614 {
		t.Fatalf("%+v, %v", status, err)
	}
}

func TestLostErrorsMatchErrLockLostAndUnwrap(t *testing.T) {
	cause := errors.New("connection reset")
	err := fmt.Errorf("work: %w", &LostError{Key: "k", Reason: ReasonConnectionLost, Err: cause})
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, cause) || errors.Is(err, ErrReleased) {
		t.Fatalf("%v", err)
	}
	var lost *LostError
	if !errors.As(err, &lost) || lost.Reason != ReasonConnectionLost {
		t.Fatalf("%+v", lost)
	}
	unavailable := &unavailableError{message: "cannot reach x", err: cause}
	if !errors.Is(unavailable, ErrUnavailable) || !errors.Is(unavailable, cause) {
		t.Fatal(unavailable)
	}
}

func TestADeadlockIsADeadlockErrorWithItsCycle(t *testing.T) {
	body := `{"type":"/problems/deadlock","title":"Deadlock","status":409,"key":"x",
		"detail":"waiting for x would close a cycle of session waits: x -> y","cycle":["x","y"]}`
	err := fmt.Errorf("wrapped: %w", parseRefusal(409, nil, []byte(body)))
	var deadlock *DeadlockError
	var problem *Problem
	if !errors.Is(err, ErrDeadlock) || !errors.As(err, &deadlock) || !errors.As(err, &problem) {
		t.Fatalf("%v: Is %v, As %v", err, errors.Is(err, ErrDeadlock), deadlock)
	}
	if len(deadlock.Cycle) != 2 || deadlock.Cycle[0] != "x" || deadlock.Cycle[1] != "y" || problem.Key != "x" {
		t.Fatalf("cycle %q, problem %+v", deadlock.Cycle, problem)
	}
	if errors.Is(err, ErrLockHeld) || err.Error() != "wrapped: "+problem.Error() {
		t.Fatalf("%v", err)
	}
	// Other refusals stay plain problems.
	other := parseRefusal(409, nil, []byte(`{"type":"/problems/lock-held","title":"Lock is held","status":409}`))
	if !errors.As(other, &problem) || errors.As(other, &deadlock) {
		t.Fatalf("%T", other)
	}
}

func TestASessionLostErrorMatchesSessionNotFound(t *testing.T) {
	cause := errors.New("connection reset")
	err := &SessionLostError{Reason: ReasonConnectionLost, Err: cause}
	if !errors.Is(err, ErrSessionNotFound) || !errors.Is(err, cause) || errors.Is(err, ErrLockLost) {
		t.Fatalf("%v", err)
	}
	lockLost := &LostError{Key: "k", Reason: ReasonSessionEnded, Err: err}
	if !errors.Is(lockLost, ErrLockLost) || !errors.Is(lockLost, ErrSessionNotFound) {
		t.Fatalf("%v", lockLost)
	}
	want := "lockgate: lost the lock k: the session it hung on ended: lockgate: lost the session: " +
		"the stream to the gateway broke, so nothing keeps it alive: connection reset"
	if lockLost.Error() != want {
		t.Fatalf("%q", lockLost.Error())
	}
}
