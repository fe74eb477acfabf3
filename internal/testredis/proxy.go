package testredis

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Mode is what a Proxy does with traffic. The zero value is Pass.
type Mode uint8

const (
	// Pass forwards bytes both ways as they come.
	Pass Mode = iota
	// Delay forwards bytes both ways and holds each chunk of the target's
	// replies for the delay given to Proxy.Delay after it was read, so every
	// request/reply round trip takes that much longer. It is latency, not
	// throttling: chunks stay in order and overlap in flight.
	Delay
	// Blackhole keeps every connection open and answers nothing: bytes are
	// read and discarded in both directions, and new connections are
	// accepted and never answered. A connection that lost bytes this way is
	// reset when the proxy leaves Blackhole, as a client or server would
	// after a partition, so no stream resumes out of step.
	Blackhole
	// Reset sends a TCP RST on every existing connection and on every new
	// one right after accepting it.
	Reset
	// Refuse closes the listener, so connects are refused, and resets the
	// existing connections: nothing listens on the port any more. Leaving
	// Refuse listens on the same port again.
	Refuse
)

var modeNames = [...]string{"pass", "delay", "blackhole", "reset", "refuse"}

// String returns pass, delay, blackhole, reset or refuse.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ProxyStats counts what reached the proxy. Tests use it to show that
// nothing touched the network while a circuit breaker was open.
type ProxyStats struct {
	// Accepted is the number of client connections accepted.
	Accepted int64
	// BytesUp is the number of bytes read from clients (forwarded or not).
	BytesUp int64
	// BytesDown is the number of bytes read from the target (forwarded or
	// not).
	BytesDown int64
}

// Proxy is a TCP fault injector between a client and a target address
// (usually a redis-server), on 127.0.0.1. Its mode can be switched at any
// time from any goroutine; the switch applies to new and existing
// connections. Everything it started ends on Close, which tb.Cleanup calls.
type Proxy struct {
	// Addr is "127.0.0.1:<port>"; it stays the same across Refuse.
	Addr   string
	target string

	accepted, bytesUp, bytesDown atomic.Int64

	mu     sync.Mutex
	mode   Mode
	delay  time.Duration
	ln     net.Listener // nil while refusing
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewProxy starts a proxy in Pass mode forwarding to target, and registers
// its Close with tb.Cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testredis: proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: make(map[*proxyConn]struct{})}
	p.wg.Add(1)
	go p.acceptLoop(ln)
	tb.Cleanup(p.Close)
	return p
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Stats returns the counters so far.
func (p *Proxy) Stats() ProxyStats {
	return ProxyStats{Accepted: p.accepted.Load(), BytesUp: p.bytesUp.Load(), BytesDown: p.bytesDown.Load()}
}

// Pass switches to Pass mode. It returns an error only when the port
// cannot be listened on again after Refuse.
func (p *Proxy) Pass() error { return p.set(Pass, 0) }

// Delay switches to Delay mode: every round trip takes d longer (d >= 0).
func (p *Proxy) Delay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("testredis: proxy delay must be >= 0, got %v", d)
	}
	return p.set(Delay, d)
}

// Blackhole switches to Blackhole mode.
func (p *Proxy) Blackhole() error { return p.set(Blackhole, 0) }

// Reset switches to Reset mode: existing connections are reset now.
func (p *Proxy) Reset() error { return p.set(Reset, 0) }

// Refuse switches to Refuse mode: the listener closes and existing
// connections are reset.
func (p *Proxy) Refuse() error { return p.set(Refuse, 0) }

func (p *Proxy) set(m Mode, d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("testredis: proxy is closed")
	}
	prev := p.mode
	if m == Refuse && p.ln != nil {
		_ = p.ln.Close() // the accept loop ends; wg tracks it
		p.ln = nil
	}
	if m != Refuse && p.ln == nil {
		ln, err := listenAgain(p.Addr)
		if err != nil {
			return fmt.Errorf("testredis: proxy listen again on %s: %w", p.Addr, err)
		}
		p.ln = ln
		p.wg.Add(1)
		go p.acceptLoop(ln)
	}
	p.mode, p.delay = m, d
	for c := range p.conns {
		switch {
		case m == Reset || m == Refuse:
			c.reset()
		case prev == Blackhole && m != Blackhole && c.tainted.Load():
			c.reset()
		}
	}
	return nil
}

// listenAgain listens on addr, retrying for up to 10 s: the kernel may
// hold the port for a moment after the previous listener closed.
func listenAgain(addr string) (net.Listener, error) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		ln, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the proxy: the listener and every connection close, and every
// goroutine it started has ended when Close returns. It is safe to call
// more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		for c := range p.conns {
			c.close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// current returns the mode and delay in force.
func (p *Proxy) current() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay
}

func (p *Proxy) acceptLoop(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed: Refuse or Close
		}
		p.accepted.Add(1)
		p.handle(c.(*net.TCPConn))
	}
}

// handle sets up one client connection according to the mode at accept.
func (p *Proxy) handle(client *net.TCPConn) {
	pc := &proxyConn{client: client, done: make(chan struct{})}
	mode, _ := p.current()
	if mode == Pass || mode == Delay {
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			// The target is down: behave as it would have, a closed door.
			pc.reset()
			return
		}
		pc.up = up.(*net.TCPConn)
	}
	// Decide and register under one lock, so a mode switch either sees this
	// connection or happened before the check below.
	p.mu.Lock()
	mode = p.mode
	switch {
	case p.closed:
		p.mu.Unlock()
		pc.close()
		return
	case mode == Reset || mode == Refuse:
		// Refuse only reaches here in the moment before the listener closed.
		p.mu.Unlock()
		pc.reset()
		return
	case pc.up == nil && mode != Blackhole:
		// Accepted in Blackhole, which ended while we looked: reset it,
		// as leaving Blackhole does to every black-holed connection.
		p.mu.Unlock()
		pc.reset()
		return
	case pc.up == nil:
		pc.tainted.Store(true) // no upstream: a black hole for its life
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()

	var streams sync.WaitGroup
	if pc.up != nil {
		streams.Add(2)
		p.wg.Add(5) // two pumps of two goroutines each, and the closer
		go func() { defer streams.Done(); p.pump(pc, pc.client, pc.up, &p.bytesUp, false) }()
		go func() { defer streams.Done(); p.pump(pc, pc.up, pc.client, &p.bytesDown, true) }()
	} else {
		streams.Add(1)
		p.wg.Add(3)
		go func() { defer streams.Done(); p.pump(pc, pc.client, nil, &p.bytesUp, false) }()
	}
	go func() {
		defer p.wg.Done()
		streams.Wait()
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
}

// proxyConn is one client connection and its upstream (nil when it was
// accepted in Blackhole mode).
type proxyConn struct {
	client, up *net.TCPConn
	// tainted is set once a byte was discarded: the stream is out of step.
	tainted atomic.Bool
	once    sync.Once
	done    chan struct{}
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		if c.up != nil {
			_ = c.up.Close()
		}
	})
}

// reset closes both sides with SO_LINGER 0, which sends RST.
func (c *proxyConn) reset() {
	_ = c.client.SetLinger(0)
	if c.up != nil {
		_ = c.up.SetLinger(0)
	}
	c.close()
}

type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst (dst nil: discard) through a queue, so Delay can
// hold each chunk (of replies: delayed) for the delay after it was read
// without stalling the reads.
// It runs a reader and a writer goroutine and returns when both ended; the
// caller accounted for two wg slots.
func (p *Proxy) pump(c *proxyConn, src, dst *net.TCPConn, counter *atomic.Int64, delayed bool) {
	q := make(chan chunk, 256)
	go func() {
		defer p.wg.Done()
		p.writeLoop(c, dst, q, delayed)
	}()
	defer p.wg.Done()
	defer close(q)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			counter.Add(int64(n))
			select {
			case q <- chunk{b: buf[:n], at: time.Now()}:
			case <-c.done:
				return
			}
		}
		if err != nil {
			c.close() // one side ended: end the connection, as a proxy would
			return
		}
	}
}

func (p *Proxy) writeLoop(c *proxyConn, dst *net.TCPConn, q <-chan chunk, delayed bool) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ch := range q {
		mode, d := p.current()
		if mode == Delay && delayed {
			if wait := time.Until(ch.at.Add(d)); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-c.done:
					return
				}
			}
			mode, _ = p.current()
		}
		if dst == nil || mode == Blackhole || mode == Reset || mode == Refuse {
			c.tainted.Store(true)
			continue
		}
		if _, err := dst.Write(ch.b); err != nil {
			c.close()
			return
		}
	}
}
