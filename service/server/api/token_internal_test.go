package api

import (
	"crypto/rand"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// testResults has every Source, each verdict, and limits of each
// algorithm.
func testResults() []ratewarden.Result {
	limits := []string{"10/1s burst 20 token_bucket", "100/1m", "5/100ms fixed_window", "7/1h sliding_log", "1000/1d", "3/2s fixed_window"}
	out := make([]ratewarden.Result, len(limits))
	for i, s := range limits {
		lim, err := ratewarden.ParseLimit(s)
		if err != nil {
			panic(err)
		}
		out[i] = ratewarden.Result{Limit: lim, Source: ratewarden.Source(i), Allowed: i%2 == 0}
	}
	return out
}

func TestTokensRoundTrip(t *testing.T) {
	p := permitToken{holder: rand.Text(), nowhere: true, policy: "jobs", key: "tenant/ä\x00"}
	enc := p.encode()
	got, err := decodePermit(enc)
	if err != nil || got != p {
		t.Fatalf("permit: %+v, %v; want %+v", got, err, p)
	}
	// The server tests forge a holder by altering bytes 2 to 17.
	if raw, _ := b64.DecodeString(enc); string(raw[2:2+len(p.holder)]) != p.holder {
		t.Errorf("the holder is not at byte 2 of the permit: % x", raw)
	}
	r := reservationToken{id: newID(), admitted: time.Unix(0, time.Now().UnixNano()), estimate: -1 << 62, policy: "", key: "k", results: testResults()}
	gr, err := openReservation(r.seal(testSecret), [][]byte{[]byte("another secret, long enough"), testSecret})
	if err != nil || !reflect.DeepEqual(gr, r) {
		t.Fatalf("reservation: %+v, %v; want %+v", gr, err, r)
	}
	if got, want := gr.limits(), "10/1s burst 20, 100/1m"; !strings.HasPrefix(got, want) {
		t.Errorf("limits() = %q, want it to start %q", got, want)
	}
	if d := gr.decision(); d.Allowed || len(d.Results) != 6 {
		t.Errorf("a decision with denied limits: %+v", d)
	}
	if _, err := decodePermit(r.seal(testSecret)); err == nil {
		t.Error("a reservation read as a permit")
	}
	if _, err := openReservation(p.encode(), [][]byte{testSecret}); err == nil {
		t.Error("a permit read as a reservation")
	}
}

// TestTokensOneEncoding: a field in any form but the one the server
// writes is no token, so that one token has one encoding.
func TestTokensOneEncoding(t *testing.T) {
	p := permitToken{holder: rand.Text(), policy: "jobs", key: "k"}
	raw, _ := b64.DecodeString(p.encode())
	long := append([]byte{raw[0], raw[1] | 0x80, 0}, raw[2:]...) // the holder's length in two bytes
	if _, err := decodePermit(b64.EncodeToString(long)); err == nil {
		t.Error("a permit with a varint longer than it needs to be was read")
	}
	// A signed varint (a reservation's estimate) reads what
	// binary.AppendVarint wrote, and only in that form.
	for _, v := range []int64{0, 1, -1, 63, -64, 64, -65, 1 << 40, -1 << 62, math.MaxInt64, math.MinInt64} {
		r := reader{b: binary.AppendVarint(nil, v)}
		if got := r.varint(); got != v || !r.done() {
			t.Errorf("varint of %d read as %d (done %v)", v, got, r.done())
		}
		long := binary.AppendVarint(nil, v)
		long[len(long)-1] |= 0x80
		r = reader{b: append(long, 0)}
		if r.varint(); r.done() {
			t.Errorf("varint of %d in %d bytes, one more than it needs, was read", v, len(long)+1)
		}
	}
	for _, c := range []struct {
		head        []byte // tag, holder length and flag
		holder, key string
	}{
		{[]byte{permitTag, 0}, "", "k"},
		{[]byte{permitTag, 2}, "h", ""},
		{[]byte{'P', 2}, "h", "k"},
		{[]byte{permitTag, 5}, "hh", "k"}, // 5: length 2, flag 1
	} {
		b := append(append(c.head, c.holder...), 4, 'j', 'o', 'b', 's')
		b = appendString(b, c.key)
		_, err := decodePermit(b64.EncodeToString(b))
		if ok := c.holder != "" && c.key != "" && c.head[0] == permitTag; ok != (err == nil) {
			t.Errorf("permit % x: %v", b, err)
		}
	}

	// A reservation laid out by hand: only the forms seal writes open.
	id := newID()
	for _, c := range []struct {
		limit, source string
		verdict       byte
		ok            bool
	}{
		{"100/1m", "store", 1, true},
		{"100/1m", "fail_open", 0, true},
		{"100/60s", "store", 1, false},
		{"100/1m", "unknown", 1, false},
		{"100/1m", "Store", 1, false},
		{"100/1m", "store", 2, false},
		{"", "store", 1, false},
	} {
		b := append([]byte{reservationTag}, id[:]...)
		b = binary.BigEndian.AppendUint64(b, 1_700_000_000_123_456_789)
		b = binary.AppendVarint(b, 100)
		b = appendString(b, "api")
		b = appendString(b, "k")
		b = binary.AppendUvarint(b, 1)
		b = appendString(b, c.limit)
		b = appendString(b, c.source)
		b = append(b, c.verdict)
		s := b64.EncodeToString(append(b, mac(testSecret, b)...))
		r, err := openReservation(s, [][]byte{testSecret})
		if c.ok != (err == nil) {
			t.Errorf("%q %q %d: %+v, %v", c.limit, c.source, c.verdict, r, err)
			continue
		}
		if c.ok && (r.seal(testSecret) != s || r.admitted.UnixNano() != 1_700_000_000_123_456_789) {
			t.Errorf("%q %q %d: opens to %+v, which seals to another token", c.limit, c.source, c.verdict, r)
		}
	}
}

// FuzzTokens: no input makes the decoders panic; what decodes encodes
// back to the same bytes, so one token has one meaning.
func FuzzTokens(f *testing.F) {
	p := permitToken{holder: rand.Text(), policy: "jobs", key: "k"}
	r := reservationToken{id: newID(), admitted: time.Now(), estimate: 5, policy: "api", key: "k", results: testResults()[:1]}
	f.Add(p.encode())
	f.Add(r.seal(testSecret))
	f.Add("")
	f.Add("cAA")
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := decodePermit(s); err == nil {
			if got := p.encode(); got != s {
				t.Fatalf("permit %q decodes to %+v, which encodes to %q", s, p, got)
			}
		}
		if r, err := openReservation(s, [][]byte{testSecret}); err == nil {
			if got := r.seal(testSecret); got != s {
				t.Fatalf("reservation %q opens to %+v, which seals to %q", s, r, got)
			}
		}
	})
}
