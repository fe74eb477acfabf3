package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"unicode/utf8"
)

// decodeBody reads exactly one JSON object into v (a pointer to a struct)
// strictly: Content-Type application/json, valid UTF-8, no unknown,
// duplicate or case-folded member names, nothing after the object.
// encoding/json alone would take {"KEY": ...} for "key", keep the last of
// two "key" members and turn invalid UTF-8 into U+FFFD.
//
// The bodies clients send are small flat objects: decodeSimple takes
// those in one pass without allocating; anything else, every invalid body
// included, goes through the full decoder (decodeJSON), which alone words
// the problems.
func decodeBody(r *http.Request, v any) *apiError {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return newProblem(probMediaType, "want Content-Type: application/json")
		}
	}
	buf := bodyBufs.Get().(*bytes.Buffer)
	defer putBodyBuf(buf)
	_, err := buf.ReadFrom(r.Body)
	body := buf.Bytes()
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return newProblem(probTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
	case err != nil:
		return newProblem(probInvalid, "the request body could not be read")
	case !utf8.Valid(body):
		return newProblem(probInvalid, "the request body is not valid UTF-8")
	}
	if decodeSimple(body, v) {
		return nil
	}
	return decodeJSON(body, v)
}

// bodyBufs pools the buffers request bodies are read into: decoding
// copies what it keeps.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func putBodyBuf(b *bytes.Buffer) {
	if b.Cap() > 64<<10 {
		return // a large body's buffer is left to the collector
	}
	b.Reset()
	bodyBufs.Put(b)
}

// member is one member of a flat JSON object, as scanSimple found it.
type member struct {
	name []byte
	str  []byte // a string's bytes (no escapes in them)
	num  int64  // an integer's value
	kind byte   // 's' string, 'n' integer
}

// decodeSimple decodes body (valid UTF-8) into v (a pointer to one of
// the /v1 request types) and reports true when body is the simplest form
// of a valid request: one
// object, each member named exactly as a field of v and at most once,
// strings without escapes or U+FFFD, integers without fraction or
// exponent that fit an int64. Then it decodes as decodeJSON would. On
// false v is unchanged.
func decodeSimple(body []byte, v any) bool {
	var arr [8]member
	ms, ok := scanSimple(body, arr[:0])
	if !ok {
		return false
	}
	switch x := v.(type) {
	case *CheckRequest:
		return setFields(ms, []simpleField{{name: "key", str: &x.Key}, {name: "policy", str: &x.Policy}, {name: "limit", str: &x.Limit}, {name: "cost", num: &x.Cost}})
	case *ResetRequest:
		return setFields(ms, []simpleField{{name: "key", str: &x.Key}, {name: "policy", str: &x.Policy}, {name: "limit", str: &x.Limit}})
	case *AcquireRequest:
		return setFields(ms, []simpleField{{name: "key", str: &x.Key}, {name: "policy", str: &x.Policy}})
	case *ReleaseRequest:
		return setFields(ms, []simpleField{{name: "permit", str: &x.Permit}})
	case *ExtendRequest:
		return setFields(ms, []simpleField{{name: "permit", str: &x.Permit}, {name: "ttl_ms", num: &x.TTLMS}})
	case *ReserveRequest:
		return setFields(ms, []simpleField{{name: "key", str: &x.Key}, {name: "policy", str: &x.Policy}, {name: "limit", str: &x.Limit}, {name: "estimate", num: &x.Estimate}})
	case *SettleRequest:
		return setFields(ms, []simpleField{{name: "reservation", str: &x.Reservation}, {name: "actual", num: &x.Actual}})
	}
	return false
}

// simpleField is a field of a request that decodeSimple can set: a
// string (str) or an optional integer (num).
type simpleField struct {
	name string
	str  *string
	num  **int64
}

// setFields sets fs from ms when each member names one of fs, of its
// kind, at most once (at most 4 fields); else it sets nothing and reports
// false.
func setFields(ms []member, fs []simpleField) bool {
	var seen [4]bool
	idx := make([]int, len(ms), 8) // within scanSimple's 8 members: on the stack
	for j, m := range ms {
		i := -1
		for k := range fs {
			if string(m.name) == fs[k].name {
				i = k
			}
		}
		if i < 0 || seen[i] || (fs[i].str != nil) != (m.kind == 's') {
			return false
		}
		seen[i], idx[j] = true, i
	}
	for j, m := range ms {
		f := fs[idx[j]]
		if f.str != nil {
			*f.str = string(m.str)
		} else {
			n := m.num
			*f.num = &n
		}
	}
	return true
}

// scanSimple appends the members of body, a flat JSON object, to ms: it
// reports false for anything else, and for what it leaves to the full
// decoder (escapes, U+FFFD, control characters, null, booleans, nested
// values, fractions, exponents, integers beyond int64, more than cap(ms)
// members, anything after the object).
func scanSimple(b []byte, ms []member) ([]member, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return ms, skipSpace(b, i+1) == len(b)
	}
	for {
		var m member
		var ok bool
		if m.name, i, ok = scanString(b, i); !ok {
			return nil, false
		}
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		if i = skipSpace(b, i+1); i >= len(b) {
			return nil, false
		}
		if b[i] == '"' {
			m.kind = 's'
			m.str, i, ok = scanString(b, i)
		} else {
			m.kind = 'n'
			m.num, i, ok = scanInt(b, i)
		}
		if !ok || len(ms) == cap(ms) {
			return nil, false
		}
		ms = append(ms, m)
		if i = skipSpace(b, i); i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return ms, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// skipSpace is the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// replacementChar is U+FFFD in UTF-8: checkStrings refuses it.
const replacementChar = "\xef\xbf\xbd"

// scanString scans the string starting at b[i] (a '"'): its bytes and the
// index after it. Escapes, control characters and U+FFFD are left to the
// full decoder.
func scanString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			return s, j + 1, !bytes.Contains(s, []byte(replacementChar))
		case c == '\\' || c < 0x20:
			return nil, j, false
		}
	}
	return nil, len(b), false
}

// scanInt scans the integer starting at b[i]: -?(0|[1-9][0-9]*), not
// followed by a fraction or exponent, within int64.
func scanInt(b []byte, i int) (int64, int, bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var n uint64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i-start >= 19 { // 20 digits may not fit: leave them to the decoder
			return 0, i, false
		}
		n = n*10 + uint64(b[i]-'0')
		i++
	}
	switch {
	case i == start, b[start] == '0' && i-start > 1:
		return 0, i, false
	case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
		return 0, i, false
	case neg && n > 1<<63:
		return 0, i, false
	case neg:
		return -int64(n), i, true // n == 1<<63 wraps to math.MinInt64, as wanted
	case n > 1<<63-1:
		return 0, i, false
	}
	return int64(n), i, true
}

// decodeJSON is the full decoder of decodeBody, after the body's checks.
func decodeJSON(body []byte, v any) *apiError {
	if e := checkMembers(body, v); e != nil {
		return e
	}
	dec := newStrictDecoder(body)
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err != nil {
		return jsonProblem(err)
	}
	return checkStrings(v)
}
