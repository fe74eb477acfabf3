package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/httplimit"
)

// Header values every JSON answer carries, shared: net/http only reads
// them, and Set and Add replace or copy a value slice, never write to it.
var (
	jsonContentType    = []string{"application/json"}
	problemContentType = []string{"application/problem+json"}
	noStore            = []string{"no-store"}
)

// writeJSON answers status with v as JSON and a newline. A Decision is
// written by appendDecision, into a pooled buffer; anything else by
// encoding/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	if d, ok := v.(*Decision); ok {
		bp := jsonBufs.Get().(*[]byte)
		b := append(appendDecision((*bp)[:0], d), '\n')
		writeJSONBytes(w, status, b)
		*bp = b
		jsonBufs.Put(bp)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		httplimit.WriteProblem(w, httplimit.Problem{Type: ProblemBase + probInternalError.slug, Title: probInternalError.title, Status: probInternalError.status})
		return
	}
	writeJSONBytes(w, status, append(b, '\n'))
}

// writeProblemJSON answers status with v, a problem with extension
// members, as application/problem+json.
func writeProblemJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		httplimit.WriteProblem(w, httplimit.Problem{Type: ProblemBase + probInternalError.slug, Title: probInternalError.title, Status: probInternalError.status})
		return
	}
	writeBody(w, status, problemContentType, append(b, '\n'))
}

func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	writeBody(w, status, jsonContentType, b)
}

// writeBody answers status with b of Content-Type ct.
func writeBody(w http.ResponseWriter, status int, ct []string, b []byte) {
	h := w.Header()
	h["Content-Type"] = ct
	h["Cache-Control"] = noStore
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

var jsonBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendDecision appends d as encoding/json marshals it (its fields in
// order, omitempty as tagged, strings escaped as encoding/json escapes
// them, HTML characters included): TestAppendDecision compares the two.
func appendDecision(b []byte, d *Decision) []byte {
	b = appendBoolField(b, `{"allowed":`, d.Allowed)
	b = appendBoolField(b, `,"over_limit":`, d.OverLimit)
	b = appendJSONString(append(b, `,"key":`...), d.Key)
	if d.Policy != "" {
		b = appendJSONString(append(b, `,"policy":`...), d.Policy)
	}
	b = appendJSONString(append(b, `,"limit":`...), d.Limit)
	b = strconv.AppendInt(append(b, `,"cost":`...), d.Cost, 10)
	b = strconv.AppendInt(append(b, `,"remaining":`...), d.Remaining, 10)
	b = strconv.AppendInt(append(b, `,"retry_after_ms":`...), d.RetryAfterMS, 10)
	b = strconv.AppendInt(append(b, `,"reset_after_ms":`...), d.ResetAfterMS, 10)
	b = appendJSONString(append(b, `,"source":`...), d.Source)
	b = appendBoolField(b, `,"degraded":`, d.Degraded)
	if d.Shadow {
		b = append(b, `,"shadow":true`...)
	}
	return append(b, '}')
}

func appendBoolField(b []byte, name string, v bool) []byte {
	return strconv.AppendBool(append(b, name...), v)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it: '"' and '\' with a backslash; \b, \f, \n, \r and \t by
// name; other control characters and the HTML characters <, > and & as
// \u00XX; U+2028 and U+2029 as \u2028 and \u2029; each byte of invalid
// UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
