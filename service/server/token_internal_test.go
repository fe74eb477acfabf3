package server

import (
	"crypto/rand"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

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

// TestTokensOneEncoding: a field in any form but the one the server
// writes is no token, so that one token has one encoding.
func TestTokensOneEncoding(t *testing.T) {
	p := permitToken{holder: rand.Text(), policy: "jobs", key: "k"}
	raw, _ := b64.DecodeString(p.encode())
	long := append([]byte{raw[0], raw[1] | 0x80, 0}, raw[2:]...) // the holder's length in two bytes
	if _, err := decodePermit(b64.EncodeToString(long)); err == nil {
		t.Error("a permit with a varint longer than it needs to be was read")
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
}

// FuzzTokens: no input makes the decoders panic; what decodes encodes
// back to the same bytes, so one token has one meaning.
func FuzzTokens(f *testing.F) {
	p := permitToken{holder: rand.Text(), policy: "jobs", key: "k"}
	r := reservationToken{id: newID(), at: time.Now(), estimate: 5, counted: true, policy: "api", limit: "100/1m", key: "k"}
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
