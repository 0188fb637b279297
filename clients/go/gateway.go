// Gateway: the client of one lockgate address, its options (API key, TLS,
// HTTP client, timeout) and the HTTP plumbing every call shares.

package lockgate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds each call's wait for an answer, on top of any
// server-side wait the call asks for (see WithTimeout).
const DefaultTimeout = 10 * time.Second

// defaultMaxWait is the gateway's usual longest server-side wait; a longer
// wait is made of several requests. A gateway configured lower says so and
// is believed (Gateway.maxWait).
const defaultMaxWait = 60 * time.Second

// maxAnswer bounds the body of an ordinary answer.
const maxAnswer = 1 << 20

// Gateway is a client of one lockgate gateway (or of several behind one
// address). It is safe for use by many goroutines at once, and should be
// made once and reused: it keeps one http.Client, whose connections every
// call shares.
type Gateway struct {
	base    string
	apiKey  string
	timeout time.Duration
	client  *http.Client
	// maxWait is the longest wait (in ms) one request may ask the gateway
	// for, lowered when a gateway refuses a longer one.
	maxWait atomic.Int64
}

// Option configures a Gateway made by New.
type Option func(*settings)

type settings struct {
	apiKey  string
	tls     *tls.Config
	client  *http.Client
	timeout time.Duration
}

// WithAPIKey sends `Authorization: Bearer <key>` with every request: an API
// key of a gateway that has them, or its admin token (needed by Revoke).
func WithAPIKey(key string) Option {
	return func(s *settings) { s.apiKey = key }
}

// WithTLS uses cfg for `https://` gateways: its RootCAs (the CA bundle that
// signed the gateway's certificate) and Certificates (a client certificate,
// for a gateway that requires one). TLSConfigFromFiles builds one from PEM
// files. With WithHTTPClient, cfg is applied to that client's transport when
// it is an *http.Transport (or nil), and ignored otherwise.
func WithTLS(cfg *tls.Config) Option {
	return func(s *settings) { s.tls = cfg }
}

// WithHTTPClient makes the gateway send its requests through c (a
// transport with a proxy, tracing, ...). Its Timeout is not used: a held
// lock is a response that stays open. Bound calls with contexts and
// WithTimeout instead.
func WithHTTPClient(c *http.Client) Option {
	return func(s *settings) { s.client = c }
}

// WithTimeout bounds each call's wait for an answer (default
// DefaultTimeout), on top of any server-side wait it asks for.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) { s.timeout = d }
}

// New returns a client of the gateway at baseURL, such as
// "http://127.0.0.1:8080" or "https://locks.internal". It makes no request.
func New(baseURL string, options ...Option) *Gateway {
	s := settings{timeout: DefaultTimeout}
	for _, option := range options {
		option(&s)
	}
	g := &Gateway{
		base:    strings.TrimRight(baseURL, "/"),
		apiKey:  s.apiKey,
		timeout: s.timeout,
		client:  httpClient(s),
	}
	g.maxWait.Store(defaultMaxWait.Milliseconds())
	return g
}

// URL is the gateway's base URL.
func (g *Gateway) URL() string { return g.base }

// httpClient is the client every call of one Gateway shares.
func httpClient(s settings) *http.Client {
	var client http.Client
	if s.client != nil {
		client = *s.client
	}
	// A streamed lock is a response that stays open while the lock is held:
	// a timeout on the whole exchange would end every lock.
	client.Timeout = 0
	transport, ok := client.Transport.(*http.Transport)
	if client.Transport == nil {
		transport, ok = http.DefaultTransport.(*http.Transport).Clone(), true
		// Many goroutines taking locks at once would otherwise open and
		// close a connection for most requests (the default keeps 2).
		transport.MaxIdleConnsPerHost = 64
	} else if ok && s.tls != nil {
		transport = transport.Clone()
	}
	if ok && s.tls != nil {
		transport.TLSClientConfig = s.tls
	}
	if ok {
		client.Transport = transport
	}
	return &client
}

// TLSConfigFromFiles builds a TLS configuration from PEM files: caFile, the
// CA bundle that signed the gateway's certificate (empty: the system's
// roots), and certFile with keyFile, a client certificate for a gateway that
// requires one (empty: none).
func TLSConfigFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("lockgate: reading the CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("lockgate: no PEM certificate in %s", caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("lockgate: reading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// answer is a whole answer to an ordinary request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// call is one ordinary request.
type call struct {
	method string
	path   string
	body   any
	header http.Header
	// extra is added to the gateway's timeout: a server-side wait.
	extra time.Duration
}

// do sends a request and reads its whole answer. A refusal (4xx, 5xx) is
// returned as its *Problem; no answer within the timeout, or none at all,
// as an error matching ErrUnavailable; the caller's own cancellation as
// ctx.Err().
func (g *Gateway) do(ctx context.Context, c call) (*answer, error) {
	limit := g.timeout + c.extra
	bounded, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	request, err := g.newRequest(bounded, c.method, c.path, c.body)
	if err != nil {
		return nil, err
	}
	for name, values := range c.header {
		request.Header[name] = values
	}
	response, err := g.client.Do(request)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(io.LimitReader(response.Body, maxAnswer))
		response.Body.Close()
		if err == nil {
			if response.StatusCode >= 400 {
				return nil, parseRefusal(response.StatusCode, response.Header, body)
			}
			return &answer{status: response.StatusCode, header: response.Header, body: body}, nil
		}
	}
	return nil, g.failure(ctx, bounded, limit, err)
}

// newRequest makes a request to the gateway, with a JSON body when body is
// not nil, and the API key.
func (g *Gateway) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var reader io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("lockgate: encoding the request: %w", err)
		}
		reader = bytes.NewReader(encoded)
	}
	request, err := http.NewRequestWithContext(ctx, method, g.base+path, reader)
	if err != nil {
		return nil, fmt.Errorf("lockgate: %w", err)
	}
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	request.Header.Set("Accept", "application/json")
	if g.apiKey != "" {
		request.Header.Set("Authorization", "Bearer "+g.apiKey)
	}
	return request, nil
}

// failure is what a request that got no answer means: the caller's own
// cancellation (its error, as is), the timeout, or an unreachable gateway.
func (g *Gateway) failure(caller, bounded context.Context, limit time.Duration, err error) error {
	if caller.Err() != nil {
		return caller.Err()
	}
	if bounded.Err() != nil {
		return &unavailableError{message: fmt.Sprintf("no answer from %s within %v", g.base, limit), err: err}
	}
	return &unavailableError{message: "cannot reach " + g.base, err: err}
}

// openStream sends a request whose answer is `text/event-stream` and
// returns the response once its head arrived. A refusal is returned as its
// *Problem.
func (g *Gateway) openStream(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, error) {
	request, err := g.newRequest(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	for name, values := range header {
		request.Header[name] = values
	}
	request.Header.Set("Accept", "text/event-stream")
	// Compression would only hold events back in a buffer.
	request.Header.Set("Accept-Encoding", "identity")
	response, err := g.client.Do(request)
	if err != nil {
		return nil, err
	}
	if response.StatusCode >= 400 {
		defer response.Body.Close()
		text, _ := io.ReadAll(io.LimitReader(response.Body, maxAnswer))
		return nil, parseRefusal(response.StatusCode, response.Header, text)
	}
	if kind, _, _ := mime.ParseMediaType(response.Header.Get("Content-Type")); kind != "text/event-stream" {
		defer response.Body.Close()
		text, _ := io.ReadAll(io.LimitReader(response.Body, maxAnswer))
		return nil, &unstreamedAnswer{status: response.StatusCode, body: text,
			unavailableError: unavailableError{message: fmt.Sprintf("the answer from %s%s is %d %s, not an event stream",
				g.base, path, response.StatusCode, response.Header.Get("Content-Type"))}}
	}
	return response, nil
}

// unstreamedAnswer is an answer that is not the event stream asked for
// (from a gateway too old to stream it, say). It matches ErrUnavailable,
// and keeps the answer, which may be a grant to give back.
type unstreamedAnswer struct {
	unavailableError
	status int
	body   []byte
}

// lockPath is `/locks/<key><suffix>`, the key escaped for the path. Valid
// keys need no escaping; an invalid one reaches the gateway intact and is
// refused there as `invalid-key`.
func lockPath(key, suffix string) string {
	return "/locks/" + url.PathEscape(key) + suffix
}

// decode reads a JSON answer into v.
func decode(a *answer, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("lockgate: reading the gateway's answer: %w", err)
	}
	return nil
}

// newUUID is a random (version 4) UUID: a fresh Idempotency-Key.
func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("lockgate: no randomness: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// sleep waits d, or until ctx is done (then it returns ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff is the pause before retry number attempt (0-based) of a call the
// gateway could not serve: doubling from base, at most 5 s, at least what
// the gateway asked for (Retry-After), with jitter so that many clients do
// not come back at once.
func backoff(attempt int, base time.Duration, err error) time.Duration {
	d := base << minOf(attempt, 6)
	var problem *Problem
	if errors.As(err, &problem) && problem.RetryAfter > d {
		d = problem.RetryAfter
	}
	d = minOf(d, 5*time.Second)
	var b [1]byte
	_, _ = rand.Read(b[:])
	return d/2 + d/2*time.Duration(b[0])/255
}

// detached is a context with the values of its parent but none of its
// cancellation: a held lock outlives the context its acquisition was
// given, and keeps that context's values (trace ids, loggers).
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }
func (d detached) Value(key any) any         { return d.parent.Value(key) }
func (d detached) String() string            { return "lockgate.detached" }
