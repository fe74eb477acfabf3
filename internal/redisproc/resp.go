package redisproc

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Caps on the waits of Do and Ping.
const (
	replyCap = 30 * time.Second // for a reply to Do
	pingCap  = 5 * time.Second  // for a reply to Ping (callers poll it)
)

// Do sends one command to addr over a fresh connection and returns the
// reply as text: integers and simple strings as they are, bulk strings as
// their content, arrays flattened with newlines, nil as "(nil)" (replies
// come in RESP2 shapes, so CONFIG GET and SENTINEL MASTER are flat
// name/value lists). A Redis error reply is an error that contains Redis'
// message (MOVED, READONLY, ...). Connecting, the handshake and the reply
// take at most 30 s in all.
func Do(addr string, args ...string) (string, error) {
	return do(context.Background(), addr, replyCap, args)
}

// DoContext is Do bounded by ctx's deadline as well, connecting and the
// handshake included.
func DoContext(ctx context.Context, addr string, args ...string) (string, error) {
	return do(ctx, addr, replyCap, args)
}

// Ping returns nil when addr answers PING with PONG, within 5 s.
func Ping(addr string) error {
	r, err := do(context.Background(), addr, pingCap, []string{"PING"})
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("redisproc: PING %s: answered %q", addr, r)
	}
	return nil
}

// Do is the package's Do on the server's address.
func (s *Server) Do(args ...string) (string, error) { return Do(s.Addr, args...) }

// Client returns a rueidis client of one connection to addr that does not
// guess the deployment (a single-node client even on a cluster node or a
// sentinel), with client-side caching and retries off and every wait
// bounded by wait. The caller must Close it.
func Client(addr string, wait time.Duration) (rueidis.Client, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:         []string{addr},
		ForceSingleClient:   true,
		DisableCache:        true,
		DisableRetry:        true,
		AlwaysRESP2:         true,
		ClientSetInfo:       rueidis.DisableClientSetInfo,
		PipelineMultiplex:   -1, // one connection
		RingScaleEachConn:   4,
		ReadBufferEachConn:  32 << 10,
		WriteBufferEachConn: 4 << 10,
		Dialer:              net.Dialer{Timeout: wait},
		ConnWriteTimeout:    wait,
	})
	if err != nil {
		if c != nil { // ForceSingleClient returns the client even when the dial failed
			c.Close()
		}
		return nil, fmt.Errorf("redisproc: connect to %s: %w", addr, err)
	}
	return c, nil
}

func do(ctx context.Context, addr string, wait time.Duration, args []string) (string, error) {
	if len(args) == 0 || args[0] == "" {
		return "", fmt.Errorf("redisproc: Do: no command: %w", ErrInvalidOption)
	}
	if strings.HasSuffix(strings.ToUpper(args[0]), "SUBSCRIBE") {
		return "", fmt.Errorf("redisproc: Do: %s needs a subscription, not one reply: %w", args[0], ErrInvalidOption)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Connecting and the handshake do not see ctx: give them what is left
	// of it (ctx has a deadline now).
	dl, _ := ctx.Deadline()
	if wait = time.Until(dl); wait <= 0 {
		return "", fmt.Errorf("redisproc: %s on %s: %w", args[0], addr, context.DeadlineExceeded)
	}
	c, err := Client(addr, wait)
	if err != nil {
		return "", err
	}
	defer c.Close()
	res := c.Do(ctx, c.B().Arbitrary(args...).Build())
	if err := res.NonRedisError(); err != nil {
		return "", fmt.Errorf("redisproc: %s on %s: %w", args[0], addr, err)
	}
	m, _ := res.ToMessage() // a Redis error or nil stays in m: flatten reads it
	var out []string
	if err := flatten(&m, &out); err != nil {
		return "", fmt.Errorf("redisproc: %s on %s: %w", args[0], addr, err)
	}
	return strings.Join(out, "\n"), nil
}

// flatten appends m's text to out: arrays element by element.
func flatten(m *rueidis.RedisMessage, out *[]string) error {
	if m.IsNil() {
		*out = append(*out, "(nil)")
		return nil
	}
	if err := m.Error(); err != nil {
		return err
	}
	switch {
	case m.IsArray():
		elems, err := m.ToArray()
		if err != nil {
			return err
		}
		for i := range elems {
			if err := flatten(&elems[i], out); err != nil {
				return err
			}
		}
	case m.IsInt64():
		n, err := m.ToInt64()
		if err != nil {
			return err
		}
		*out = append(*out, strconv.FormatInt(n, 10))
	default:
		s, err := m.ToString()
		if err != nil {
			return err
		}
		*out = append(*out, s)
	}
	return nil
}
