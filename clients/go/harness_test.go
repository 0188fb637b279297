// The real processes the tests run against: a redis-server on a free port
// (no persistence), the lockgate gateway (LOCKGATE_BIN) on a port of its
// own choosing, and a TCP proxy that can drop answers and connections.

package lockgate_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// adminToken is the shared gateway's admin token (for Revoke).
const adminToken = "test-admin-token"

var (
	sharedOnce sync.Once
	sharedErr  error
	shared     struct {
		dir     string
		redis   *redisServer
		gateway *gatewayServer
	}
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(candidateEnv); spec != "" {
		os.Exit(runCandidate(spec))
	}
	code := m.Run()
	if shared.gateway != nil {
		shared.gateway.stop()
	}
	if shared.redis != nil {
		shared.redis.stop()
	}
	if shared.dir != "" && os.Getenv("LOCKGATE_TEST_KEEP_LOGS") == "" {
		os.RemoveAll(shared.dir)
	} else if shared.dir != "" {
		fmt.Fprintf(os.Stderr, "test logs kept in %s\n", shared.dir)
	}
	os.Exit(code)
}

// sharedStack is a Redis and a gateway (with admin token adminToken) for
// the tests that leave them as they found them; started on first use.
func sharedStack(t testing.TB) (*redisServer, *gatewayServer) {
	t.Helper()
	sharedOnce.Do(func() {
		shared.dir, sharedErr = os.MkdirTemp("", "lockgate-go-")
		if sharedErr != nil {
			return
		}
		shared.redis, sharedErr = startRedis(shared.dir)
		if sharedErr != nil {
			return
		}
		shared.gateway, sharedErr = startGateway(shared.dir, shared.redis, "--admin-token", adminToken)
	})
	if sharedErr != nil {
		t.Fatalf("starting the shared Redis and gateway: %v", sharedErr)
	}
	return shared.redis, shared.gateway
}

// logDir is where one test's processes write their logs: a temporary
// directory, kept after the run when LOCKGATE_TEST_KEEP_LOGS is set.
func logDir(t testing.TB) string {
	t.Helper()
	if os.Getenv("LOCKGATE_TEST_KEEP_LOGS") == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "lockgate-go-"+regexp.MustCompile(`\W`).ReplaceAllString(t.Name(), "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("logs kept in %s", dir)
	return dir
}

// ownRedis starts a Redis for one test, which may freeze or flush it.
func ownRedis(t testing.TB) *redisServer {
	t.Helper()
	redis, err := startRedis(logDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(redis.stop)
	return redis
}

// ownGateway starts a gateway for one test, which may kill or freeze it.
func ownGateway(t testing.TB, redis *redisServer, args ...string) *gatewayServer {
	t.Helper()
	gateway, err := startGateway(logDir(t), redis, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gateway.stop)
	return gateway
}

// process is a child process with its log file.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func launch(dir, logName, name string, args []string, env []string) (*process, error) {
	logPath := filepath.Join(dir, logName)
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// end sends sig (after SIGCONT, in case the process is frozen), and
// SIGKILL if it has not exited within 5 s.
func (p *process) end(sig syscall.Signal) {
	p.signal(syscall.SIGCONT)
	p.signal(sig)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *process) logText() string {
	text, _ := os.ReadFile(p.log)
	return string(text)
}

// freePort is a TCP port nobody listens on now.
func freePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

type redisServer struct {
	port int
	*process
}

func startRedis(dir string) (*redisServer, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p, err := launch(dir, fmt.Sprintf("redis-%d.log", port), "redis-server",
			[]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, nil)
		if err != nil {
			return nil, err
		}
		r := &redisServer{port: port, process: p}
		if lastErr = r.waitForPing(5 * time.Second); lastErr == nil {
			return r, nil
		}
		// The port may have been taken meanwhile: another one.
		p.end(syscall.SIGKILL)
	}
	return nil, fmt.Errorf("redis-server did not start: %w", lastErr)
}

func (r *redisServer) waitForPing(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if r.exited() {
			return errors.New("redis-server exited: " + r.logText())
		}
		conn, err := net.DialTimeout("tcp", r.addr(), time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			_, _ = conn.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG from %s", r.addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }
func (r *redisServer) url() string  { return "redis://" + r.addr() }

// cli runs redis-cli against this server.
func (r *redisServer) cli(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-p", strconv.Itoa(r.port)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// freeze stops Redis in its tracks (SIGSTOP): it keeps its connections and
// answers nothing until thaw.
func (r *redisServer) freeze() { r.signal(syscall.SIGSTOP) }
func (r *redisServer) thaw()   { r.signal(syscall.SIGCONT) }
func (r *redisServer) stop()   { r.end(syscall.SIGKILL) }

// lockRedisKey is the Redis key the gateway keeps a lock in.
func lockRedisKey(key string) string { return "lockgate:lock:{" + key + "}" }

type gatewayServer struct {
	addr string
	*process
}

var instances struct {
	sync.Mutex
	n int
}

// gatewayBinary is $LOCKGATE_BIN, or the repository's release build.
func gatewayBinary() string {
	if bin := os.Getenv("LOCKGATE_BIN"); bin != "" {
		return bin
	}
	return filepath.Join("..", "..", "target", "release", "lockgate")
}

var servingLine = regexp.MustCompile(`lockgate serving addr=(\S+)`)

func startGateway(dir string, redis *redisServer, args ...string) (*gatewayServer, error) {
	bin := gatewayBinary()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no gateway binary at %s (set LOCKGATE_BIN): %w", bin, err)
	}
	instances.Lock()
	instances.n++
	name := fmt.Sprintf("gateway-%d", instances.n)
	instances.Unlock()
	logLevel := os.Getenv("RUST_LOG")
	if logLevel == "" {
		logLevel = "info"
	}
	p, err := launch(dir, name+".log", bin, append([]string{
		"serve", "--listen", "127.0.0.1:0", "--redis-url", redis.url(), "--instance-id", name,
		"--redis-timeout-ms", "1000", "--shutdown-timeout-ms", "2000",
	}, args...), []string{"NO_COLOR=1", "RUST_LOG=" + logLevel})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if match := servingLine.FindStringSubmatch(p.logText()); match != nil {
			return &gatewayServer{addr: match[1], process: p}, nil
		}
		if p.exited() || time.Now().After(deadline) {
			p.end(syscall.SIGKILL)
			return nil, fmt.Errorf("the gateway did not start: %s", p.logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gatewayServer) url() string { return "http://" + g.addr }

// kill ends the gateway as a crash would: it releases nothing.
func (g *gatewayServer) kill() { g.end(syscall.SIGKILL) }

// freeze stops the gateway (SIGSTOP): its connections stay open and say
// nothing until thaw.
func (g *gatewayServer) freeze() { g.signal(syscall.SIGSTOP) }
func (g *gatewayServer) thaw()   { g.signal(syscall.SIGCONT) }
func (g *gatewayServer) stop()   { g.end(syscall.SIGTERM) }

// proxy is a TCP proxy to a gateway that a test can make misbehave.
type proxy struct {
	listener net.Listener
	upstream string

	mu       sync.Mutex
	dropNext int
	refusing bool
	accepted int
	// mutedBelow: the answers of connections accepted before it are
	// dropped, their connections kept open.
	mutedBelow int
	open       []net.Conn
	// rewrite, when set, changes what a client sends before it is passed on.
	rewrite   func(sent []byte) []byte
	requests  []string
	dropped   []string
	closeOnce sync.Once
}

func newProxy(t testing.TB, upstream string) *proxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{listener: listener, upstream: upstream}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "http://" + p.listener.Addr().String() }

// dropAnswers makes the next n connections forward their request, wait for
// the gateway's answer, and close without passing it on: the request took
// effect, and its answer was lost on the way back.
func (p *proxy) dropAnswers(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropNext = n
}

// refuse makes new connections close at once (while on).
func (p *proxy) refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = on
}

// rewriting makes the proxy pass on what clients send changed by f.
func (p *proxy) rewriting(f func(sent []byte) []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rewrite = f
}

// cut closes every open connection.
func (p *proxy) cut() {
	p.mu.Lock()
	open := p.open
	p.open = nil
	p.mu.Unlock()
	for _, conn := range open {
		conn.Close()
	}
}

// mute makes every open connection silent: it stays open, and the
// gateway's answers on it are dropped.
func (p *proxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mutedBelow = p.accepted
}

// connections is how many connections were accepted.
func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// sentRequests is the first bytes each connection sent (its request head).
func (p *proxy) sentRequests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// droppedAnswers is what the gateway answered on each dropped connection.
func (p *proxy) droppedAnswers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dropped...)
}

func (p *proxy) close() {
	p.closeOnce.Do(func() {
		p.listener.Close()
		p.cut()
	})
}

func (p *proxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		index := p.accepted
		refusing, drop := p.refusing, p.dropNext > 0
		if drop {
			p.dropNext--
		}
		p.mu.Unlock()
		if refusing {
			client.Close()
			continue
		}
		upstream, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.open = append(p.open, client, upstream)
		p.mu.Unlock()
		go p.forwardRequests(client, upstream)
		go p.forwardAnswers(upstream, client, drop, index)
	}
}

func (p *proxy) forwardRequests(client, upstream net.Conn) {
	defer upstream.Close()
	defer client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.requests = append(p.requests, string(buf[:n]))
			sent := buf[:n]
			if p.rewrite != nil {
				sent = p.rewrite(sent)
			}
			p.mu.Unlock()
			if _, werr := upstream.Write(sent); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) forwardAnswers(upstream, client net.Conn, drop bool, index int) {
	defer upstream.Close()
	defer client.Close()
	buf := make([]byte, 64<<10)
	if drop {
		n, _ := upstream.Read(buf)
		p.mu.Lock()
		p.dropped = append(p.dropped, string(buf[:n]))
		p.mu.Unlock()
		return
	}
	for {
		n, err := upstream.Read(buf)
		p.mu.Lock()
		muted := index <= p.mutedBelow
		p.mu.Unlock()
		if n > 0 && !muted {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// uniqueKey is a lock key no other test uses.
func uniqueKey(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := regexp.MustCompile(`[^A-Za-z0-9._:-]`).ReplaceAllString(t.Name(), ".")
	if len(name) > 100 {
		name = name[:100]
	}
	return "go-test:" + name + ":" + hex.EncodeToString(b[:])
}

// eventually polls cond until it holds, or fails the test after within.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// doneWithin waits for done, and fails the test after within; it returns
// how long it waited.
func doneWithin(t testing.TB, done <-chan struct{}, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("not within %v: %s", within, what)
		return 0
	}
}
