package testredis

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The proxy forwards bytes, whatever they say: the tests that watch one
// connection's bytes put it in front of an echo server, and the ones about
// Redis traffic in front of a redis-server, spoken to through Do and Ping
// (rueidis).

// payload is what roundTrip sends; the echo server returns it.
const payload = "proxy round trip\n"

// roundTrip sends payload over c and waits up to wait for its echo.
func roundTrip(c net.Conn, wait time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c, payload); err != nil {
		return "", err
	}
	b := make([]byte, len(payload))
	n, err := io.ReadFull(c, b)
	return string(b[:n]), err
}

// echoServer listens on loopback and writes back whatever a connection
// sends, until the test ends (then every goroutine it started has ended).
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("echo listen: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c); _ = c.Close() })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echoWorks checks that a new connection through p gets its bytes back.
func echoWorks(t *testing.T, p *Proxy, when string) {
	t.Helper()
	c := dial(t, p.Addr)
	if got, err := roundTrip(c, answerWait); err != nil || got != payload {
		t.Fatalf("round trip on a new connection %s = %q, %v; want the echo", when, got, err)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, answerWait)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// answerWait is how long a test waits for an answer it expects: far above
// what one takes, so a busy machine cannot make it time out. (Waits for
// answers a test expects never to come stay short.)
const answerWait = 10 * time.Second

// waitStats polls p's counters until ok accepts them, for at most 30 s.
func waitStats(t *testing.T, p *Proxy, what string, ok func(ProxyStats) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(p.Stats()); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("proxy stats %+v after 30 s: want %s", p.Stats(), what)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyPass(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr)
	if p.Mode() != Pass {
		t.Fatalf("new proxy mode = %v, want pass", p.Mode())
	}
	if _, err := Do(p.Addr, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Do("GET", "k") // straight to Redis: the write went through
	if err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	st := p.Stats()
	if st.Accepted != 1 || st.BytesUp == 0 || st.BytesDown == 0 {
		t.Fatalf("stats after one command = %+v, want 1 accepted and bytes both ways", st)
	}
}

func TestProxyDelay(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c := dial(t, p.Addr)
	if _, err := roundTrip(c, answerWait); err != nil { // connection established at full speed
		t.Fatal(err)
	}
	if err := p.Delay(-time.Second); err == nil {
		t.Fatal("Delay(-1s) did not fail")
	}
	// Long enough that a round trip after Pass, however slow the machine,
	// takes less.
	const d = 2 * time.Second
	if err := p.Delay(d); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := roundTrip(c, d+answerWait)
	if took := time.Since(start); err != nil || got != payload || took < d {
		t.Fatalf("round trip via Delay(%v) = %q, %v after %v; want the echo after >= %v", d, got, err, took, d)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := roundTrip(c, answerWait); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= d {
		t.Fatalf("round trip after Pass took %v, want < %v (the delay was still applied)", took, d)
	}
}

func TestProxyBlackhole(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	old := dial(t, p.Addr)
	if _, err := roundTrip(old, answerWait); err != nil {
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	before := p.Stats()
	// Existing and new connections stay open and answer nothing.
	if _, err := roundTrip(old, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip on an existing connection in Blackhole: err = %v, want a timeout", err)
	}
	fresh := dial(t, p.Addr)
	if _, err := roundTrip(fresh, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip on a new connection in Blackhole: err = %v, want a timeout", err)
	}
	waitStats(t, p, "both sends read and one more accepted", func(st ProxyStats) bool {
		return st.BytesUp >= before.BytesUp+2*int64(len(payload)) && st.Accepted == before.Accepted+1
	})
	// Leaving Blackhole resets the connections that lost bytes; new ones work.
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{old, fresh} {
		_ = c.SetDeadline(time.Now().Add(answerWait))
		if _, err := c.Read(make([]byte, 16)); err == nil || isTimeout(err) {
			t.Fatalf("read on a black-holed connection after Pass: err = %v, want reset/EOF", err)
		}
	}
	echoWorks(t, p, "after Pass")
}

func TestProxyReset(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	old := dial(t, p.Addr)
	if _, err := roundTrip(old, answerWait); err != nil {
		t.Fatal(err)
	}
	if err := p.Reset(); err != nil {
		t.Fatal(err)
	}
	_ = old.SetDeadline(time.Now().Add(answerWait))
	if _, err := old.Read(make([]byte, 16)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read on an existing connection after Reset: err = %v, want ECONNRESET", err)
	}
	// New connections are accepted, then reset. On a busy machine the RST
	// can arrive before the dialer learns that its connect completed, and
	// then the dial itself fails with ECONNRESET: either way, reset.
	c, err := net.DialTimeout("tcp", p.Addr, answerWait)
	if err == nil {
		_, err = roundTrip(c, answerWait)
		_ = c.Close()
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("a new connection in Reset: err = %v, want reset", err)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	echoWorks(t, p, "after Pass")
}

func TestProxyRefuse(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	old := dial(t, p.Addr)
	if _, err := roundTrip(old, answerWait); err != nil {
		t.Fatal(err)
	}
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr, answerWait); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial in Refuse: err = %v, want ECONNREFUSED", err)
	}
	_ = old.SetDeadline(time.Now().Add(answerWait))
	if _, err := old.Read(make([]byte, 16)); err == nil || isTimeout(err) {
		t.Fatalf("read on an existing connection in Refuse: err = %v, want reset/EOF", err)
	}
	if err := p.Pass(); err != nil { // listens on the same port again
		t.Fatal(err)
	}
	echoWorks(t, p, "after Pass")
}

// A dead target looks like a closed door through the proxy, not a hang.
func TestProxyTargetDown(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr)
	s.Kill()
	// The reset can beat the dial's own completion: either may report it.
	c, err := net.DialTimeout("tcp", p.Addr, answerWait)
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(answerWait))
		_, err = c.Read(make([]byte, 16))
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("connection through a proxy to a dead target: err = %v, want reset/EOF", err)
	}
	s.Restart(t)
	if err := Ping(p.Addr); err != nil {
		t.Fatalf("PING after the target came back: %v", err)
	}
}

// Close ends every goroutine even with connections open in every state;
// TestMain's goleak check enforces it for the whole package.
func TestProxyCloseWithOpenConnections(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	a := dial(t, p.Addr)
	if _, err := roundTrip(a, answerWait); err != nil {
		t.Fatal(err)
	}
	read := p.Stats().BytesUp
	if err := p.Delay(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(a, payload); err != nil { // its echo waits an hour
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	b := dial(t, p.Addr)
	if _, err := io.WriteString(b, payload); err != nil {
		t.Fatal(err)
	}
	waitStats(t, p, "both sends read", func(st ProxyStats) bool { return st.BytesUp >= read+2*int64(len(payload)) })
	p.Close()
	p.Close() // idempotent
	for _, c := range []net.Conn{a, b} {
		_ = c.SetDeadline(time.Now().Add(answerWait))
		if _, err := io.ReadAll(c); isTimeout(err) {
			t.Fatalf("connection still open after Close: %v", err)
		}
	}
	if err := p.Pass(); err == nil {
		t.Fatal("Pass on a closed proxy did not fail")
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{Pass: "pass", Delay: "delay", Blackhole: "blackhole", Reset: "reset", Refuse: "refuse", 9: "Mode(9)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", m, got, want)
		}
	}
}
