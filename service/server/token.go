package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"
)

// The HTTP API hands out two kinds of token, each an opaque unpadded
// base64url string that the caller sends back as it got it: a permit
// (POST /v1/acquire, taken by /v1/release and /v1/extend) and a
// reservation (POST /v1/reserve, taken by /v1/settle). Their first byte
// names the kind and its layout, so that one is never read as the other
// and a later layout can be told apart.
//
// A permit is not signed: what protects it is its holder, 128 random bits
// that the store knows the permit by, so a caller cannot release or extend
// a permit it was not given, and every replica takes every other one's
// permits with no secret to share. A reservation is signed (HMAC-SHA256,
// truncated to 128 bits) because what it carries decides what a
// settlement charges or refunds, and where.
const (
	permitTag      = 'P'
	reservationTag = 'R'
	idBytes        = 16 // a permit's holder, a reservation's id: 128 random bits
	macBytes       = 16
	// MinSecretBytes is the shortest secret WithReservationSecrets takes.
	MinSecretBytes = 16
)

var b64 = base64.RawURLEncoding.Strict() // one string per token: no stray bits in the last character

// errToken is the one answer to a token that does not decode: a caller
// learns nothing from which check failed.
var errToken = errors.New("not a token of this service")

// permitToken is what a permit carries.
type permitToken struct {
	holder [idBytes]byte
	// nowhere: granted by fail_open while the store could not decide,
	// and held nowhere, so release and extend have nothing to do.
	nowhere bool
	policy  string
	key     string // the caller's key
}

// holderID is the holder the store knows the permit by.
func (p *permitToken) holderID() string { return hex.EncodeToString(p.holder[:]) }

func (p *permitToken) encode() string {
	b := make([]byte, 0, 2+idBytes+2*binary.MaxVarintLen64+len(p.policy)+len(p.key))
	b = append(b, permitTag, boolByte(p.nowhere))
	b = append(b, p.holder[:]...)
	b = appendString(b, p.policy)
	b = appendString(b, p.key)
	return b64.EncodeToString(b)
}

// decodePermit reads a permit; errToken when s is not one.
func decodePermit(s string) (permitToken, error) {
	b, err := b64.DecodeString(s)
	if err != nil || len(b) < 2+idBytes || b[0] != permitTag || b[1] > 1 {
		return permitToken{}, errToken
	}
	p := permitToken{nowhere: b[1] == 1}
	copy(p.holder[:], b[2:])
	r := reader{b: b[2+idBytes:]}
	p.policy = r.string()
	p.key = r.string()
	if !r.done() {
		return permitToken{}, errToken
	}
	return p, nil
}

// reservationToken is what a reservation carries: enough for any replica
// holding the secret to settle it.
type reservationToken struct {
	id       [idBytes]byte // names the reservation's settlement record
	at       time.Time     // when the store's answer arrived, on the issuing replica's clock
	estimate int64
	// counted: the estimate was consumed (the reservation was admitted,
	// and not by fail_open, which counts nowhere).
	counted bool
	policy  string // the policy's name; "" for an inline limit
	limit   string // the Limit's String form, as it was counted
	key     string // the caller's key
}

// seal encodes r signed with secret.
func (r *reservationToken) seal(secret []byte) string {
	b := make([]byte, 0, 2+idBytes+8+3*binary.MaxVarintLen64+len(r.policy)+len(r.limit)+len(r.key)+macBytes)
	b = append(b, reservationTag, boolByte(r.counted))
	b = append(b, r.id[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.at.UnixMicro()))
	b = binary.AppendVarint(b, r.estimate)
	b = appendString(b, r.policy)
	b = appendString(b, r.limit)
	b = appendString(b, r.key)
	b = append(b, mac(secret, b)...)
	return b64.EncodeToString(b)
}

// openReservation reads a reservation signed with one of secrets;
// errToken when s is not one, or was altered, or signed with none of them.
func openReservation(s string, secrets [][]byte) (reservationToken, error) {
	b, err := b64.DecodeString(s)
	const fixed = 2 + idBytes + 8
	if err != nil || len(b) < fixed+macBytes || b[0] != reservationTag || b[1] > 1 {
		return reservationToken{}, errToken
	}
	body, tag := b[:len(b)-macBytes], b[len(b)-macBytes:]
	signed := false
	for _, sec := range secrets {
		if hmac.Equal(tag, mac(sec, body)) {
			signed = true
			break
		}
	}
	if !signed {
		return reservationToken{}, errToken
	}
	r := reservationToken{counted: b[1] == 1}
	copy(r.id[:], b[2:])
	r.at = time.UnixMicro(int64(binary.BigEndian.Uint64(b[2+idBytes:])))
	rd := reader{b: body[fixed:]}
	r.estimate = rd.varint()
	r.policy = rd.string()
	r.limit = rd.string()
	r.key = rd.string()
	if !rd.done() {
		return reservationToken{}, errToken
	}
	return r, nil
}

// mac is the truncated HMAC-SHA256 of b under secret.
func mac(secret, b []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(b)
	return h.Sum(nil)[:macBytes]
}

// newID is 128 random bits.
func newID() [idBytes]byte {
	var id [idBytes]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return id
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// reader reads a token's fields; a field past the end, or malformed,
// makes it bad, and done false.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.bad = true
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

// done reports whether every field was read, and nothing is left.
func (r *reader) done() bool { return !r.bad && len(r.b) == 0 }
