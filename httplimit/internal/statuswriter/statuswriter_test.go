package statuswriter

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// plain is a ResponseWriter with no optional interface; it counts what
// reaches it through the ones the tests add around it.
type plain struct {
	h                        http.Header
	codes                    []int
	body                     strings.Builder
	flushes, hijacks, pushes int
	hijackErr                error
	readFroms                int
}

func newPlain() *plain                       { return &plain{h: http.Header{}} }
func (p *plain) Header() http.Header         { return p.h }
func (p *plain) Write(b []byte) (int, error) { return p.body.Write(b) }
func (p *plain) WriteHeader(code int)        { p.codes = append(p.codes, code) }
func (p *plain) flush()                      { p.flushes++ }

type (
	flusher    struct{ p *plain }
	errFlusher struct{ p *plain }
	hijacker   struct{ p *plain }
	pusher     struct{ p *plain }
	readerFrom struct{ *plain }
	unwrapsTo  struct { // Unwrap to inner, nothing else
		*plain
		inner http.ResponseWriter
	}
)

func (f flusher) Flush()               { f.p.flush() }
func (f errFlusher) FlushError() error { f.p.flush(); return nil }
func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h.p.hijacks++
	return nil, nil, h.p.hijackErr
}
func (u pusher) Push(string, *http.PushOptions) error { u.p.pushes++; return nil }
func (r readerFrom) ReadFrom(src io.Reader) (int64, error) {
	r.readFroms++
	return io.Copy(&r.body, src)
}
func (u unwrapsTo) Unwrap() http.ResponseWriter { return u.inner }

type caps struct{ flush, hijack, push bool }

func capsOf(w http.ResponseWriter) caps {
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, p := w.(http.Pusher)
	return caps{f, h, p}
}

// Wrap's writer is a Flusher, a Hijacker and a Pusher exactly when the
// writer underneath is (Flush and Hijack also when reached by Unwrap, or
// Flush as FlushError, as http.ResponseController finds them), and always
// a ReaderFrom.
func TestWrapKeepsInterfaces(t *testing.T) {
	p := newPlain()
	f, h, u := flusher{p}, hijacker{p}, pusher{p}
	for _, tc := range []struct {
		name string
		w    http.ResponseWriter
		want caps
	}{
		{"plain", p, caps{}},
		{"Flusher", struct {
			*plain
			http.Flusher
		}{p, f}, caps{flush: true}},
		{"Hijacker", struct {
			*plain
			http.Hijacker
		}{p, h}, caps{hijack: true}},
		{"Flusher, Hijacker", struct {
			*plain
			http.Flusher
			http.Hijacker
		}{p, f, h}, caps{flush: true, hijack: true}},
		{"Pusher", struct {
			*plain
			http.Pusher
		}{p, u}, caps{push: true}},
		{"Flusher, Pusher", struct {
			*plain
			http.Flusher
			http.Pusher
		}{p, f, u}, caps{flush: true, push: true}},
		{"Hijacker, Pusher", struct {
			*plain
			http.Hijacker
			http.Pusher
		}{p, h, u}, caps{hijack: true, push: true}},
		{"all three", struct {
			*plain
			http.Flusher
			http.Hijacker
			http.Pusher
		}{p, f, h, u}, caps{true, true, true}},
		{"FlushError", struct {
			*plain
			errFlusher
		}{p, errFlusher{p}}, caps{flush: true}},
		{"Flusher, Hijacker by Unwrap", unwrapsTo{p, struct {
			*plain
			http.Flusher
			http.Hijacker
		}{p, f, h}}, caps{flush: true, hijack: true}},
		{"Pusher by Unwrap: not found", unwrapsTo{p, struct {
			*plain
			http.Pusher
		}{p, u}}, caps{}},
	} {
		w, rec := Wrap(tc.w)
		if got := capsOf(w); got != tc.want {
			t.Errorf("%s: Wrap's writer can do %+v, want %+v", tc.name, got, tc.want)
		}
		if _, ok := w.(io.ReaderFrom); !ok {
			t.Errorf("%s: Wrap's writer is no io.ReaderFrom", tc.name)
		}
		if rec.Unwrap() != tc.w {
			t.Errorf("%s: Unwrap does not return the writer underneath", tc.name)
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
		codes []int // what reached the writer underneath
	}{
		{"nothing written", func(http.ResponseWriter) {}, 200, nil},
		{"status", func(w http.ResponseWriter) { w.WriteHeader(404) }, 404, []int{404}},
		{"the first final status counts", func(w http.ResponseWriter) { w.WriteHeader(503); w.WriteHeader(200) }, 503, []int{503, 200}},
		{"informational before the final", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(201) }, 201, []int{103, 201}},
		{"101 is final", func(w http.ResponseWriter) { w.WriteHeader(101) }, 101, []int{101}},
		{"body first", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")); w.WriteHeader(500) }, 200, []int{500}},
		{"ReadFrom first", func(w http.ResponseWriter) {
			_, _ = w.(io.ReaderFrom).ReadFrom(strings.NewReader("x"))
			w.WriteHeader(500)
		}, 200, []int{500}},
	} {
		p := newPlain()
		w, rec := Wrap(p)
		tc.write(w)
		if got := rec.Outcome(); got != tc.want {
			t.Errorf("%s: Outcome() = %d, want %d", tc.name, got, tc.want)
		}
		if !slices.Equal(p.codes, tc.codes) {
			t.Errorf("%s: the writer underneath got statuses %v, want %v", tc.name, p.codes, tc.codes)
		}
	}
}

// Flush, Hijack and Push go to the writer underneath; a flush sends the
// header (200 unless one was written), a hijack before any status is
// 101, and a failed hijack is nothing.
func TestFlushAndHijack(t *testing.T) {
	p := newPlain()
	w, rec := Wrap(struct {
		*plain
		http.Flusher
		http.Hijacker
	}{p, flusher{p}, hijacker{p}})
	w.(http.Flusher).Flush()
	if p.flushes != 1 || rec.Outcome() != 200 {
		t.Errorf("after Flush: %d flushes underneath, Outcome %d; want 1, 200", p.flushes, rec.Outcome())
	}

	p = newPlain()
	w, rec = Wrap(struct {
		*plain
		http.Pusher
	}{p, pusher{p}})
	if err := w.(http.Pusher).Push("/style.css", nil); err != nil || p.pushes != 1 || rec.status != 0 {
		t.Errorf("Push: %v, %d pushes underneath, status %d; want nil, 1, none", err, p.pushes, rec.status)
	}

	p = newPlain()
	p.hijackErr = errors.New("no")
	hj := struct {
		*plain
		http.Hijacker
	}{p, hijacker{p}}
	w, rec = Wrap(hj)
	if _, _, err := w.(http.Hijacker).Hijack(); err == nil || p.hijacks != 1 || rec.status != 0 {
		t.Errorf("failed Hijack: err %v, %d hijacks underneath, status %d; want the error, 1, none", err, p.hijacks, rec.status)
	}
	p.hijackErr = nil
	if _, _, err := http.NewResponseController(w).Hijack(); err != nil || p.hijacks != 2 || rec.Outcome() != 101 {
		t.Errorf("Hijack through ResponseController: err %v, %d hijacks underneath, Outcome %d; want nil, 2, 101", err, p.hijacks, rec.Outcome())
	}

	// Nothing underneath flushes: FlushError says so and sends nothing.
	p = newPlain()
	_, rec = Wrap(p)
	if err := rec.FlushError(); !errors.Is(err, http.ErrNotSupported) || rec.status != 0 {
		t.Errorf("FlushError without a Flusher: %v, status %d; want ErrNotSupported, none", err, rec.status)
	}
}

// ReadFrom uses the writer underneath's ReadFrom when it has one (the
// sendfile path) and copies otherwise.
func TestReadFrom(t *testing.T) {
	p := newPlain()
	w, _ := Wrap(readerFrom{p})
	if n, err := w.(io.ReaderFrom).ReadFrom(strings.NewReader("hello")); n != 5 || err != nil || p.readFroms != 1 || p.body.String() != "hello" {
		t.Errorf("ReadFrom over a ReaderFrom: %d, %v, %d calls underneath, body %q", n, err, p.readFroms, p.body.String())
	}
	p = newPlain()
	w, _ = Wrap(p)
	if n, err := w.(io.ReaderFrom).ReadFrom(strings.NewReader("hello")); n != 5 || err != nil || p.body.String() != "hello" {
		t.Errorf("ReadFrom over a plain writer: %d, %v, body %q", n, err, p.body.String())
	}
}
