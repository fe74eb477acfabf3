package httplimit_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// caps is what a handler finds its ResponseWriter can do.
type caps struct {
	flusher, hijacker, pusher, readerFrom bool
}

func capsOf(w http.ResponseWriter) caps {
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, p := w.(http.Pusher)
	_, r := w.(io.ReaderFrom)
	return caps{f, h, p, r}
}

// countingMiddleware returns a WithCountIf middleware whose CountFunc
// records each status it sees, and a function that waits until it has
// seen n (a flushed response can reach the client before the handler
// ends) and returns them.
func countingMiddleware(t *testing.T) (*httplimit.Middleware, func(n int) []int) {
	t.Helper()
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	statuses := make(chan int, 100)
	m := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Hour)), httplimit.WithCountIf(func(_ *http.Request, status int) bool {
		statuses <- status
		return true
	}))
	return m, func(n int) []int {
		var seen []int
		// A bound for a stalled machine, far above what a request takes.
		timeout := time.After(time.Minute)
		for len(seen) < n {
			select {
			case s := <-statuses:
				seen = append(seen, s)
			case <-timeout:
				t.Errorf("the CountFunc saw %v within a minute, want %d statuses", seen, n)
				return seen
			}
		}
		select {
		case s := <-statuses:
			seen = append(seen, s)
		default:
		}
		return seen
	}
}

// Under WithCountIf the handler's writer can do exactly what the server's
// can, and http.ResponseController reaches the rest (deadlines, full
// duplex) through Unwrap: over HTTP/1.1, HTTP/2, and with a recorder.
func TestCountIfWriterKeepsInterfaces(t *testing.T) {
	cases := []struct {
		name  string
		bare  caps // what the server's own writer can do
		serve func(t *testing.T, h http.Handler)
	}{
		{"HTTP/1.1", caps{flusher: true, hijacker: true, readerFrom: true}, func(t *testing.T, h http.Handler) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			fetch(t, srv.Client(), srv.URL)
		}},
		{"HTTP/2", caps{flusher: true, pusher: true}, func(t *testing.T, h http.Handler) {
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			fetch(t, srv.Client(), srv.URL)
		}},
		{"recorder", caps{flusher: true}, func(t *testing.T, h http.Handler) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = client
			h.ServeHTTP(httptest.NewRecorder(), r)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var bare, wrapped caps
			var deadlineErr, duplexErr, hijackErr error
			var proto string
			probe := func(c *caps) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					*c, proto = capsOf(w), r.Proto
					if c == &wrapped {
						rc := http.NewResponseController(w)
						deadlineErr = rc.SetWriteDeadline(time.Now().Add(time.Minute))
						if r.ProtoMajor == 1 && r.RemoteAddr != client {
							duplexErr = rc.EnableFullDuplex()
						}
						if !c.hijacker {
							_, _, hijackErr = rc.Hijack()
						}
					}
					w.WriteHeader(http.StatusAccepted)
				}
			}
			tc.serve(t, probe(&bare))
			m, seen := countingMiddleware(t)
			tc.serve(t, m.Handler(probe(&wrapped)))
			want := bare
			want.readerFrom = true // the recorder adds ReadFrom, which falls back to io.Copy
			if bare != tc.bare {
				t.Fatalf("%s: the server's writer can do %+v, want %+v: the case tests something else", proto, bare, tc.bare)
			}
			if wrapped != want {
				t.Errorf("%s: the handler's writer can do %+v behind the middleware, %+v without; want the same (ReadFrom always)", proto, wrapped, bare)
			}
			if tc.name != "recorder" && (deadlineErr != nil || duplexErr != nil) {
				t.Errorf("%s: through http.ResponseController: SetWriteDeadline %v, EnableFullDuplex %v; want nil", proto, deadlineErr, duplexErr)
			}
			if !wrapped.hijacker && !errors.Is(hijackErr, http.ErrNotSupported) {
				t.Errorf("%s: Hijack through http.ResponseController: %v, want ErrNotSupported", proto, hijackErr)
			}
			if got := seen(1); len(got) != 1 || got[0] != http.StatusAccepted {
				t.Errorf("CountFunc saw %v, want [202]", got)
			}
		})
	}
}

func fetch(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	c.CloseIdleConnections()
}

// A handler that hijacks the connection (a WebSocket) is seen as 101
// Switching Protocols, whether it hijacks by type assertion or through
// http.ResponseController.
func TestCountIfHijack(t *testing.T) {
	for _, via := range []string{"assertion", "ResponseController"} {
		t.Run(via, func(t *testing.T) {
			m, seen := countingMiddleware(t)
			srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var conn net.Conn
				var brw *bufio.ReadWriter
				var err error
				if via == "assertion" {
					conn, brw, err = w.(http.Hijacker).Hijack()
				} else {
					conn, brw, err = http.NewResponseController(w).Hijack()
				}
				if err != nil {
					t.Errorf("Hijack: %v", err)
					return
				}
				defer conn.Close()
				_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
				_ = brw.Flush()
			})))
			defer srv.Close()
			fetch(t, srv.Client(), srv.URL)
			if got := seen(1); len(got) != 1 || got[0] != http.StatusSwitchingProtocols {
				t.Errorf("CountFunc saw %v, want [101]", got)
			}
		})
	}
}
