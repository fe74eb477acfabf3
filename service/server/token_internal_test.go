package server

import (
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func TestTokensRoundTrip(t *testing.T) {
	p := permitToken{holder: newID(), nowhere: true, policy: "jobs", key: "tenant/ä\x00"}
	got, err := decodePermit(p.encode())
	if err != nil || got != p {
		t.Fatalf("permit: %+v, %v; want %+v", got, err, p)
	}
	r := reservationToken{id: newID(), at: time.UnixMicro(time.Now().UnixMicro()), estimate: -1 << 62, counted: true, policy: "", limit: "10/1s burst 20 token_bucket", key: "k"}
	gr, err := openReservation(r.seal(testSecret), [][]byte{[]byte("another secret, long enough"), testSecret})
	if err != nil || gr != r {
		t.Fatalf("reservation: %+v, %v; want %+v", gr, err, r)
	}
	if _, err := decodePermit(r.seal(testSecret)); err == nil {
		t.Error("a reservation read as a permit")
	}
	if _, err := openReservation(p.encode(), [][]byte{testSecret}); err == nil {
		t.Error("a permit read as a reservation")
	}
}

// FuzzTokens: no input makes the decoders panic; what decodes encodes
// back to the same bytes, so one token has one meaning.
func FuzzTokens(f *testing.F) {
	p := permitToken{holder: newID(), policy: "jobs", key: "k"}
	r := reservationToken{id: newID(), at: time.Now(), estimate: 5, counted: true, policy: "api", limit: "100/1m", key: "k"}
	f.Add(p.encode())
	f.Add(r.seal(testSecret))
	f.Add("")
	f.Add("UA")
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
