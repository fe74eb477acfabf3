package testredis

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ping sends PING over c and waits up to wait for the reply.
func ping(c net.Conn, wait time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
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
	s := Start(t)
	p := NewProxy(t, s.Addr)
	c := dial(t, p.Addr)
	if _, err := ping(c, answerWait); err != nil { // connection established at full speed
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
	line, err := ping(c, d+answerWait)
	if took := time.Since(start); err != nil || line != "+PONG\r\n" || took < d {
		t.Fatalf("PING via Delay(%v) = %q, %v after %v; want +PONG after >= %v", d, line, err, took, d)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := ping(c, answerWait); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= d {
		t.Fatalf("PING after Pass took %v, want < %v (the delay was still applied)", took, d)
	}
}

func TestProxyBlackhole(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr)
	old := dial(t, p.Addr)
	if _, err := ping(old, answerWait); err != nil {
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	before := p.Stats()
	// Existing and new connections stay open and answer nothing.
	if _, err := ping(old, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on an existing connection in Blackhole: err = %v, want a timeout", err)
	}
	fresh := dial(t, p.Addr)
	if _, err := ping(fresh, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on a new connection in Blackhole: err = %v, want a timeout", err)
	}
	waitStats(t, p, "the PINGs read and one more accepted", func(st ProxyStats) bool {
		return st.BytesUp >= before.BytesUp+2*14 && st.Accepted == before.Accepted+1
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
	if err := Ping(p.Addr); err != nil {
		t.Fatalf("PING on a new connection after Pass: %v", err)
	}
}

func TestProxyReset(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr)
	old := dial(t, p.Addr)
	if _, err := ping(old, answerWait); err != nil {
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
		_, err = ping(c, answerWait)
		_ = c.Close()
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("a new connection in Reset: err = %v, want reset", err)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	if err := Ping(p.Addr); err != nil {
		t.Fatalf("PING after Pass: %v", err)
	}
}

func TestProxyRefuse(t *testing.T) {
	s := Start(t)
	p := NewProxy(t, s.Addr)
	old := dial(t, p.Addr)
	if _, err := ping(old, answerWait); err != nil {
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
	if err := Ping(p.Addr); err != nil {
		t.Fatalf("PING after Pass: %v", err)
	}
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
	s := Start(t)
	p := NewProxy(t, s.Addr)
	a := dial(t, p.Addr)
	if _, err := ping(a, answerWait); err != nil {
		t.Fatal(err)
	}
	read := p.Stats().BytesUp
	if err := p.Delay(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil { // its reply waits an hour
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	b := dial(t, p.Addr)
	if _, err := b.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	waitStats(t, p, "both PINGs read", func(st ProxyStats) bool { return st.BytesUp >= read+2*14 })
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
