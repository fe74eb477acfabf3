package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
)

// The HTTP API hands out two kinds of token, each an opaque unpadded
// base64url string that the caller sends back as it got it: a permit
// (POST /v1/acquire, taken by /v1/release and /v1/extend) and a
// reservation (POST /v1/reserve, taken by /v1/settle). Their first byte
// names the kind and its layout, so that one is never read as the other
// and a later layout can be told apart ('P' and 'R' were the first
// layouts, before the tokens carried what ratewarden.Limiter.PermitOf and
// ReservationOf take; they are read as no token at all).
//
// A permit is not signed: what protects it is its holder, the 128 random
// bits (or more) as text that ratewarden.Permit.Holder names it by in the
// store, so a caller cannot release or extend a permit it was not given,
// and every replica takes every other one's permits with no secret to
// share. A reservation is signed (HMAC-SHA256, truncated to 128 bits)
// because what it carries decides what a settlement charges or refunds,
// and where.
const (
	permitTag      = 'p'
	reservationTag = 'r'
	idBytes        = 16 // a reservation's id: 128 random bits
	macBytes       = 16
	// MinSecretBytes is the shortest secret that signs reservations.
	MinSecretBytes = 16
)

var b64 = base64.RawURLEncoding.Strict() // one string per token: no stray bits in the last character

// errToken is the one answer to a token that does not decode: a caller
// learns nothing from which check failed.
var errToken = errors.New("not a token of this service")

// permitToken is what a permit carries: with the policy's key prefix,
// what ratewarden.Limiter.PermitOf takes.
type permitToken struct {
	holder string // ratewarden.Permit.Holder
	// nowhere: granted by fail_open while the store could not decide,
	// and held nowhere, so release and extend have nothing to do.
	nowhere bool
	policy  string
	key     string // the caller's key
}

// encode lays the permit out as its tag, the holder's length (shifted
// left one bit, nowhere in the low bit), the holder, the policy and the
// key. The holder starts at byte 2 while it is under 64 bytes.
func (p *permitToken) encode() string {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(p.holder)+len(p.policy)+len(p.key))
	b = append(b, permitTag)
	b = binary.AppendUvarint(b, uint64(len(p.holder))<<1|uint64(boolByte(p.nowhere)))
	b = append(b, p.holder...)
	b = appendString(b, p.policy)
	b = appendString(b, p.key)
	return b64.EncodeToString(b)
}

// decodePermit reads a permit; errToken when s is not one, or names no
// holder or no key.
func decodePermit(s string) (permitToken, error) {
	b, err := b64.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != permitTag {
		return permitToken{}, errToken
	}
	r := reader{b: b[1:]}
	head := r.uvarint()
	p := permitToken{nowhere: head&1 == 1, holder: r.take(head >> 1)}
	p.policy = r.string()
	p.key = r.string()
	if !r.done() || p.holder == "" || p.key == "" {
		return permitToken{}, errToken
	}
	return p, nil
}

// reservationToken is what a reservation carries: with the policy's key
// prefix, what ratewarden.Limiter.ReservationOf takes, so that any
// replica holding the secret settles it.
type reservationToken struct {
	id [idBytes]byte // names the reservation's settlement record
	// admitted is ratewarden.Reservation.Admitted: the issuing replica's
	// clock, to the nanosecond.
	admitted time.Time
	estimate int64
	policy   string // the policy's name; "" for an inline limit
	key      string // the caller's key
	// results holds, per limit, what Reservation.Settle reads of the
	// admission: the Limit, who decided (its Source) and the verdict.
	// Nothing else of a Result is carried.
	results []ratewarden.Result
}

// decision is the reservation's admission, as ReservationOf takes it.
func (r *reservationToken) decision() ratewarden.Decision {
	allowed := true
	for _, res := range r.results {
		allowed = allowed && res.Allowed
	}
	return ratewarden.Decision{Allowed: allowed, Results: r.results}
}

// limits names the reservation's limits, as answers show them: their
// String forms, comma-separated.
func (r *reservationToken) limits() string {
	names := make([]string, len(r.results))
	for i, res := range r.results {
		names[i] = res.Limit.String()
	}
	return strings.Join(names, ", ")
}

// seal lays r out as its tag, id, admission instant (Unix nanoseconds,
// big-endian), estimate, policy, key and, after their count, each limit
// (its String form), source (its String form) and verdict (a byte 0 or
// 1); then signs it with secret.
func (r *reservationToken) seal(secret []byte) string {
	n := 1 + idBytes + 8 + 4*binary.MaxVarintLen64 + len(r.policy) + len(r.key) + macBytes
	b := make([]byte, 0, n+len(r.results)*48) // a limit and a source take about 48 bytes
	b = append(b, reservationTag)
	b = append(b, r.id[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.admitted.UnixNano()))
	b = binary.AppendVarint(b, r.estimate)
	b = appendString(b, r.policy)
	b = appendString(b, r.key)
	b = binary.AppendUvarint(b, uint64(len(r.results)))
	for _, res := range r.results {
		b = appendString(b, res.Limit.String())
		b = appendString(b, res.Source.String())
		b = append(b, boolByte(res.Allowed))
	}
	b = append(b, mac(secret, b)...)
	return b64.EncodeToString(b)
}

// openReservation reads a reservation signed with one of secrets;
// errToken when s is not one, or was altered, or signed with none of them.
func openReservation(s string, secrets [][]byte) (reservationToken, error) {
	b, err := b64.DecodeString(s)
	const fixed = 1 + idBytes + 8
	if err != nil || len(b) < fixed+macBytes || b[0] != reservationTag {
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
	r := reservationToken{admitted: time.Unix(0, int64(binary.BigEndian.Uint64(body[1+idBytes:])))}
	copy(r.id[:], body[1:])
	rd := reader{b: body[fixed:]}
	r.estimate = rd.varint()
	r.policy = rd.string()
	r.key = rd.string()
	n := rd.uvarint()
	if n == 0 || n > uint64(len(rd.b))/3 { // a limit takes 3 bytes at least
		return reservationToken{}, errToken
	}
	r.results = make([]ratewarden.Result, n)
	for i := range r.results {
		r.results[i] = rd.result()
	}
	if !rd.done() || r.key == "" {
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
// makes it bad, and done false. It takes varints in their shortest form
// only, so that one token has one encoding.
type reader struct {
	b   []byte
	bad bool
}

// varint reads a signed varint: binary.AppendVarint's zig-zag encoding
// of the value as an unsigned varint, so its shortest form is uvarint's.
func (r *reader) varint() int64 {
	u := r.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	var buf [binary.MaxVarintLen64]byte
	if n <= 0 || n != binary.PutUvarint(buf[:], v) {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// take reads n bytes as a string.
func (r *reader) take(n uint64) string {
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// string reads a string after its length.
func (r *reader) string() string {
	n := r.uvarint()
	return r.take(n)
}

// flag reads a byte that must be 0 or 1.
func (r *reader) flag() bool {
	if r.bad || len(r.b) == 0 || r.b[0] > 1 {
		r.bad = true
		return false
	}
	v := r.b[0] == 1
	r.b = r.b[1:]
	return v
}

// result reads a limit of a reservation: its Limit and Source by their
// String forms (only the forms they print are taken), and its verdict.
func (r *reader) result() ratewarden.Result {
	ls, ss := r.string(), r.string()
	lim, err := ratewarden.ParseLimit(ls)
	src, ok := sourceNamed(ss)
	allowed := r.flag()
	if err != nil || lim.String() != ls || !ok {
		r.bad = true
	}
	return ratewarden.Result{Limit: lim, Source: src, Allowed: allowed}
}

// sourceNamed is the Source whose String is name.
func sourceNamed(name string) (ratewarden.Source, bool) {
	for s := ratewarden.Source(0); s.String() != "unknown"; s++ {
		if s.String() == name {
			return s, true
		}
	}
	return 0, false
}

// done reports whether every field was read, and nothing is left.
func (r *reader) done() bool { return !r.bad && len(r.b) == 0 }
