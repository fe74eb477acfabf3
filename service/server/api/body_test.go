package api

import (
	"reflect"
	"testing"
	"unicode/utf8"
)

// simpleBodies are bodies decodeSimple takes, and bodies it leaves to the
// full decoder (valid or not).
var simpleBodies = []struct {
	body   string
	simple bool
}{
	{`{"key":"user-1","policy":"api"}`, true},
	{` { "key" : "u" , "limit" : "10/1m" , "cost" : 3 } `, true},
	{"{\n\t\"key\": \"ü-ключ\",\r\n\"cost\": -0}", true},
	{`{"cost":9223372036854775807,"key":"k"}`, true},
	{`{"cost":-9223372036854775808,"key":"k"}`, true},
	{`{}`, true},
	{`{"key":"a\"b"}`, false},         // an escape
	{`{"k\u0065y":"a"}`, false},       // an escaped name
	{`{"key":"a","key":"b"}`, false},  // given twice
	{`{"Key":"a"}`, false},            // case-folded
	{`{"key":"a","other":1}`, false},  // unknown
	{`{"key":"a","cost":1.5}`, false}, // a fraction
	{`{"key":"a","cost":1e3}`, false}, // an exponent
	{`{"key":"a","cost":9223372036854775808}`, false},
	{`{"key":"a","cost":01}`, false},                                   // a leading zero
	{`{"key":"a","cost":null}`, false},                                 // null
	{`{"key":"a","cost":"1"}`, false},                                  // a string for a number
	{`{"key":1}`, false},                                               // a number for a string
	{`{"key":"a"}{}`, false},                                           // trailing data
	{`{"key":"a",}`, false},                                            // a trailing comma
	{`{"key":"\ufffd"}`, false},                                        // an escaped U+FFFD
	{"{\"key\":\"\xef\xbf\xbd\"}", false},                              // a raw U+FFFD
	{"{\"key\":\"a\tb\"}", false},                                      // a control character
	{`["key"]`, false},                                                 // not an object
	{`{"key":"a"`, false},                                              // cut short
	{`{"key":{"a":1}}`, false},                                         // nested
	{`{"key":true}`, false},                                            // a boolean
	{`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}`, false}, // more members than the fast path holds
	// The other request types' members: unknown to a check.
	{`{"permit":"UAB-_x","ttl_ms":30000}`, false},
	{`{"reservation":"UgAB","actual":0}`, false},
	{`{"key":"k","policy":"p","estimate":40}`, false},
	{`{"permit":"p","permit":"q"}`, false},
	{`{"actual":"5","reservation":"r"}`, false},
}

// requestTypes makes one of each /v1 request type, zero.
func requestTypes() []any {
	return []any{new(CheckRequest), new(ResetRequest), new(AcquireRequest), new(ReleaseRequest), new(ExtendRequest), new(ReserveRequest), new(SettleRequest)}
}

// TestDecodeSimple: decodeSimple takes the simple bodies, and whenever it
// takes a body, the full decoder accepts it too and decodes the same
// request, for every request type.
func TestDecodeSimple(t *testing.T) {
	for _, c := range simpleBodies {
		var in CheckRequest
		if got := decodeSimple([]byte(c.body), &in); got != c.simple {
			t.Errorf("decodeSimple(%s) = %v, want %v", c.body, got, c.simple)
		}
		sameAsFull(t, []byte(c.body))
	}
	var in CheckRequest
	if !decodeSimple([]byte(`{"key":"k","policy":"p","limit":"l","cost":7}`), &in) ||
		in.Key != "k" || in.Policy != "p" || in.Limit != "l" || in.Cost == nil || *in.Cost != 7 {
		t.Errorf("decoded %+v", in)
	}
	var rs ResetRequest
	if !decodeSimple([]byte(`{"key":"k","policy":"p"}`), &rs) || rs != (ResetRequest{Key: "k", Policy: "p"}) {
		t.Errorf("decoded %+v", rs)
	}
	if decodeSimple([]byte(`{"key":"k","cost":1}`), &rs) {
		t.Error("a reset took a cost")
	}
	var ex ExtendRequest
	if !decodeSimple([]byte(`{"ttl_ms":250,"permit":"p"}`), &ex) || ex.Permit != "p" || ex.TTLMS == nil || *ex.TTLMS != 250 {
		t.Errorf("decoded %+v", ex)
	}
	var rv ReserveRequest
	if !decodeSimple([]byte(`{"key":"k","limit":"10/1m","estimate":0}`), &rv) || rv.Key != "k" || rv.Limit != "10/1m" || rv.Estimate == nil || *rv.Estimate != 0 {
		t.Errorf("decoded %+v", rv)
	}
	var st SettleRequest
	for _, body := range []string{`{"reservation":"r","actual":"1"}`, `{"reservation":1}`, `{"reservation":"r","actual":1,"key":"k"}`, `{"actual":1,"actual":2}`} {
		if decodeSimple([]byte(body), &st) || st != (SettleRequest{}) {
			t.Errorf("decodeSimple took %s into a settlement: %+v", body, st)
		}
	}
}

// FuzzDecodeSimple: on any body decodeSimple takes, the full decoder
// agrees.
func FuzzDecodeSimple(f *testing.F) {
	for _, c := range simpleBodies {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { sameAsFull(t, body) })
}

// sameAsFull fails t when decodeSimple takes body into a request the full
// decoder does not decode to the same, or changes it when it does not
// take it. Bodies that are not UTF-8 never reach either: decodeBody
// refuses them first.
func sameAsFull(t *testing.T, body []byte) {
	t.Helper()
	if !utf8.Valid(body) {
		return
	}
	fulls := requestTypes()
	for i, fast := range requestTypes() {
		full := fulls[i]
		if !decodeSimple(body, fast) {
			if !reflect.ValueOf(fast).Elem().IsZero() {
				t.Errorf("%q: decodeSimple refused the body but changed the request: %+v", body, fast)
			}
			continue
		}
		if e := decodeJSON(body, full); e != nil {
			t.Errorf("%q: decodeSimple took the body, the full decoder refuses it: %s", body, e.detail)
			continue
		}
		if !reflect.DeepEqual(fast, full) {
			t.Errorf("%q: decodeSimple %+v, the full decoder %+v", body, fast, full)
		}
	}
}
