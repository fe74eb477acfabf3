// Package statuswriter records the status of the response a handler
// writes (httplimit's WithCountIf counts requests by it) through a
// wrapper that keeps the optional interfaces of the writer it wraps.
package statuswriter

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// A Recorder is the ResponseWriter a handler gets under WithCountIf: it
// notes the status of the response on its way through. Its Unwrap lets
// http.ResponseController reach the writer underneath (deadlines, full
// duplex); Wrap adds Flush, Hijack and Push exactly when that writer can
// do them, so type assertions tell the truth.
type Recorder struct {
	http.ResponseWriter
	status int // the final status written; 0 while none is
}

// Outcome is the status of the response as WithCountIf's CountFunc sees
// it: the status written, 200 when the handler wrote a body or nothing at
// all (net/http then sends 200), 101 when it hijacked the connection
// before writing one (a WebSocket, whose status the middleware cannot
// see).
func (w *Recorder) Outcome() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *Recorder) WriteHeader(code int) {
	// 1xx codes but 101 are informational: the final status comes later.
	if w.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *Recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// ReadFrom keeps the sendfile path of net/http's writer (io.Copy to the
// handler's writer lands here).
func (w *Recorder) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides ReadFrom, so io.Copy does not come back to Recorder.
type writerOnly struct{ io.Writer }

// Unwrap returns the writer underneath, for http.ResponseController.
func (w *Recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// FlushError flushes through http.ResponseController, which reports
// http.ErrNotSupported when nothing underneath can flush.
func (w *Recorder) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil && w.status == 0 {
		w.status = http.StatusOK // a flush sends the header
	}
	return err
}

func (w *Recorder) hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// flushVia and hijackVia give a Recorder's Flush and Hijack to the
// combinations Wrap returns; each fits in an interface without an
// allocation.
type (
	flushVia  struct{ w *Recorder }
	hijackVia struct{ w *Recorder }
)

func (f flushVia) Flush()                                        { _ = f.w.FlushError() }
func (h hijackVia) Hijack() (net.Conn, *bufio.ReadWriter, error) { return h.w.hijack() }

// Wrap returns w wrapped in a Recorder that is an http.Flusher, an
// http.Hijacker and an http.Pusher exactly when w is (directly or, for
// the first two, through Unwrap as http.ResponseController finds them).
func Wrap(w http.ResponseWriter) (http.ResponseWriter, *Recorder) {
	rec := &Recorder{ResponseWriter: w}
	f, h := flushVia{rec}, hijackVia{rec}
	p, _ := w.(http.Pusher)
	caps := 0
	if reaches(w, canFlush) {
		caps |= 1
	}
	if reaches(w, canHijack) {
		caps |= 2
	}
	if p != nil {
		caps |= 4
	}
	switch caps {
	case 1:
		return struct {
			*Recorder
			http.Flusher
		}{rec, f}, rec
	case 2:
		return struct {
			*Recorder
			http.Hijacker
		}{rec, h}, rec
	case 3:
		return struct {
			*Recorder
			http.Flusher
			http.Hijacker
		}{rec, f, h}, rec
	case 4:
		return struct {
			*Recorder
			http.Pusher
		}{rec, p}, rec
	case 5:
		return struct {
			*Recorder
			http.Flusher
			http.Pusher
		}{rec, f, p}, rec
	case 6:
		return struct {
			*Recorder
			http.Hijacker
			http.Pusher
		}{rec, h, p}, rec
	case 7:
		return struct {
			*Recorder
			http.Flusher
			http.Hijacker
			http.Pusher
		}{rec, f, h, p}, rec
	}
	return rec, rec
}

func canFlush(w http.ResponseWriter) bool {
	switch w.(type) {
	case http.Flusher, interface{ FlushError() error }:
		return true
	}
	return false
}

func canHijack(w http.ResponseWriter) bool {
	_, ok := w.(http.Hijacker)
	return ok
}

// reaches reports whether w, or a writer w unwraps to, passes has.
func reaches(w http.ResponseWriter, has func(http.ResponseWriter) bool) bool {
	for range 16 { // a bound, in case of an Unwrap cycle
		if has(w) {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}
