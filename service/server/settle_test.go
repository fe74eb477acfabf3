package server_test

import (
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server"
)

const settlePolicies = `
policies:
  tokens: 1000/1h fixed_window
  bucket: 1000/1h burst 1000 token_bucket
  short: 5/100ms fixed_window
  shadowed:
    limit: 10/1h fixed_window
    shadow_mode: true
`

// reserve posts /v1/reserve and returns the answer and its reservation.
func reserve(t *testing.T, s *server.Server, body string) (httpResp, string) {
	t.Helper()
	r := post(t, s, "/v1/reserve", body)
	tok, _ := r.body["reservation"].(string)
	if r.status != 200 || tok == "" {
		t.Fatalf("reserve %s: %d %s", body, r.status, r.raw)
	}
	return r, tok
}

func settle(t *testing.T, s *server.Server, tok string, actual int64) httpResp {
	t.Helper()
	return post(t, s, "/v1/settle", fmt.Sprintf(`{"reservation":%q,"actual":%d}`, tok, actual))
}

// remaining is what /v1/check at cost 0 reports for key under policy.
func remaining(t *testing.T, s *server.Server, key, policy string) float64 {
	t.Helper()
	r := post(t, s, "/v1/check", fmt.Sprintf(`{"key":%q,"policy":%q,"cost":0}`, key, policy))
	if r.status != 200 {
		t.Fatalf("check: %d %s", r.status, r.raw)
	}
	return r.body["remaining"].(float64)
}

// wantSettled checks a settlement's delta and applied units.
func wantSettled(t *testing.T, what string, r httpResp, delta, applied float64) {
	t.Helper()
	ap, _ := r.body["applied"].([]any)
	if r.status != 200 || r.body["delta"] != delta || len(ap) != 1 || ap[0] != applied {
		t.Fatalf("%s: want delta %v, applied [%v]; got %d %s", what, delta, applied, r.status, r.raw)
	}
}

func TestReserveSettle(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, settlePolicies)))
	alignWindow(t, time.Hour, time.Minute)
	r, tok := reserve(t, s, `{"key":"k","policy":"tokens","estimate":100}`)
	if r.body["allowed"] != true || r.body["cost"] != float64(100) || r.body["remaining"] != float64(900) ||
		r.body["settle_within_ms"] != float64(2*3600_000) || r.header.Get("X-Ratelimit-Remaining") != "900" {
		t.Fatalf("reserve: %s %v", r.raw, r.header)
	}
	st := settle(t, s, tok, 30)
	wantSettled(t, "settle 30 of 100", st, -70, -70)
	if st.body["estimate"] != float64(100) || st.body["actual"] != float64(30) || st.body["key"] != "k" || st.body["policy"] != "tokens" || st.body["limit"] != "1000/1h fixed_window" {
		t.Errorf("settle: %s", st.raw)
	}
	if got := remaining(t, s, "k", "tokens"); got != 970 {
		t.Fatalf("after settling 30 of 100: remaining %v, want exactly 970", got)
	}
	// Twice: 409, and nothing changes.
	isProblem(t, "second settle", settle(t, s, tok, 0), 409, "settled before")
	if got := remaining(t, s, "k", "tokens"); got != 970 {
		t.Fatalf("after a refused second settle: remaining %v, want 970", got)
	}
	// Actual above the estimate charges the difference.
	_, tok = reserve(t, s, `{"key":"k","policy":"tokens","estimate":100}`)
	wantSettled(t, "settle 130 of 100", settle(t, s, tok, 130), 30, 30)
	if got := remaining(t, s, "k", "tokens"); got != 840 {
		t.Fatalf("after 130 of 100: remaining %v, want 970 - 130 = 840", got)
	}
	// Exact: nothing to charge, and the reservation is still spent.
	_, tok = reserve(t, s, `{"key":"k","policy":"bucket","estimate":10}`)
	wantSettled(t, "settle 10 of 10", settle(t, s, tok, 10), 0, 0)
	isProblem(t, "settle an exact one again", settle(t, s, tok, 0), 409, "settled before")

	// A denied reservation consumed nothing and settles to nothing.
	r, tok = reserve(t, s, `{"key":"k","policy":"tokens","estimate":900}`)
	if r.body["allowed"] != false || r.header.Get("Retry-After") == "" {
		t.Fatalf("reserve 900 of 840: %s", r.raw)
	}
	wantSettled(t, "settle a denied one", settle(t, s, tok, 900), 0, 0)
	if got := remaining(t, s, "k", "tokens"); got != 840 {
		t.Fatalf("after a denied reservation's settlement: remaining %v, want 840", got)
	}

	// Shadow: allowed, over_limit, nothing consumed, nothing to settle.
	_, tok = reserve(t, s, `{"key":"k","policy":"shadowed","estimate":10}`)
	r, tok2 := reserve(t, s, `{"key":"k","policy":"shadowed","estimate":10}`)
	if r.body["allowed"] != true || r.body["over_limit"] != true || r.body["shadow"] != true {
		t.Fatalf("shadow: %s", r.raw)
	}
	wantSettled(t, "shadow, admitted", settle(t, s, tok, 4), -6, -6)
	wantSettled(t, "shadow, over the limit", settle(t, s, tok2, 4), -6, 0)

	want := map[string]float64{"refunded": 1, "charged": 1, "exact": 1, "uncounted": 1, "refused": 2}
	for result, n := range want {
		if got := metric(t, s, "ratewarden_settlements_total", `result="`+result+`"`, `policy="tokens"`) + metric(t, s, "ratewarden_settlements_total", `result="`+result+`"`, `policy="bucket"`); got != n {
			t.Errorf("settlements %s: %v, want %v", result, got, n)
		}
	}
	if got := metric(t, s, "ratewarden_settled_units_total", `policy="tokens"`, `direction="refunded"`); got != 70 {
		t.Errorf("refunded units %v, want 70", got)
	}
	if got := metric(t, s, "ratewarden_store_duration_seconds_count", `op="charge"`); got == 0 {
		t.Error("no charge store calls timed")
	}
}

// TestSettleInline: reservations of an inline limit settle on the inline
// limit's key.
func TestSettleInline(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, settlePolicies)), server.WithInlineLimits(config.InlineLimits{Enabled: true}))
	alignWindow(t, time.Hour, time.Minute)
	_, tok := reserve(t, s, `{"key":"k","limit":"50/1h fixed_window","estimate":20}`)
	wantSettled(t, "inline", settle(t, s, tok, 5), -15, -15)
	r := post(t, s, "/v1/check", `{"key":"k","limit":"50/1h fixed_window","cost":0}`)
	if r.body["remaining"] != float64(45) {
		t.Fatalf("inline after settling 5 of 20: %s", r.raw)
	}
	if got := remaining(t, s, "k", "tokens"); got != 1000 {
		t.Errorf("the policy's count moved: %v", got)
	}
}

// TestSettleRefusesForgedTokens: a reservation altered anywhere, signed
// with another secret, expired, or not one at all is a 400 that changes
// nothing.
func TestSettleRefusesForgedTokens(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, settlePolicies)), server.WithReservationSecrets(secret))
	other := start(t, memBackend(t), server.WithConfig(parseConfig(t, settlePolicies)), server.WithReservationSecrets([]byte("another secret, 32 bytes long..")))
	alignWindow(t, time.Hour, time.Minute)
	_, tok := reserve(t, s, `{"key":"victim","policy":"tokens","estimate":500}`)
	_, foreign := reserve(t, other, `{"key":"victim","policy":"tokens","estimate":1}`)
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	// Every byte altered: the flags, the id, the instant, the estimate,
	// the names, the key, the tag.
	for i := range raw {
		alt := append([]byte(nil), raw...)
		alt[i] ^= 0x04
		isProblem(t, fmt.Sprintf("byte %d altered", i), settle(t, s, base64.RawURLEncoding.EncodeToString(alt), 0), 400, `field "reservation": not a reservation of this service`)
	}
	isProblem(t, "truncated", settle(t, s, tok[:len(tok)-4], 0), 400, "not a reservation")
	isProblem(t, "another secret", settle(t, s, foreign, 0), 400, "signed with a secret this replica does not hold")
	isProblem(t, "a permit", settle(t, s, "UAAAAAAAAAAAAAAAAAAAAAAAAAA", 0), 400, "not a reservation")
	if got := remaining(t, s, "victim", "tokens"); got != 500 {
		t.Fatalf("forged settlements moved the count: remaining %v, want 500", got)
	}
	// The untouched token still settles.
	wantSettled(t, "the real one", settle(t, s, tok, 0), -500, -500)

	_, short := reserve(t, s, `{"key":"k","policy":"short","estimate":1}`)
	time.Sleep(250 * time.Millisecond) // two 100 ms periods and some
	isProblem(t, "expired", settle(t, s, short, 0), 400, "has expired: a reservation of 5/100ms fixed_window can be settled for 200ms after it was made")

	for _, c := range []struct{ body, detail string }{
		{`{"actual":1}`, `field "reservation" is required`},
		{`{"reservation":"` + tok + `"}`, `field "actual" (the actual cost, 0 or more) is required`},
		{`{"reservation":"` + tok + `","actual":-1}`, `field "actual" must be between 0 and 1000000000000, got -1`},
		{`{"reservation":"` + tok + `","actual":1000000000001}`, `field "actual" must be between 0`},
		{`{"reservation":"` + tok + `","actual":"5"}`, `field "actual": want a whole number`},
		{`{"reservation":"` + tok + `","actual":1,"key":"k"}`, `unknown field "key"`},
	} {
		isProblem(t, c.body, post(t, s, "/v1/settle", c.body), 400, c.detail)
	}
	for _, c := range []struct{ body, detail string }{
		{`{"key":"k","policy":"tokens"}`, `field "estimate"`},
		{`{"key":"k","policy":"tokens","estimate":-1}`, `cost must be >= 0`},
		{`{"key":"k","policy":"tokens","estimate":1001}`, `exceeds the capacity 1000`},
		{`{"policy":"tokens","estimate":1}`, `field "key" is required`},
		{`{"key":"k","estimate":1}`, `field "policy"`},
		{`{"key":"k","policy":"nope","estimate":1}`, `unknown policy "nope"`},
		{`{"key":"k","limit":"5/1m","estimate":1}`, `inline limits ("limit") are off`},
	} {
		status := 400
		if c.detail == `inline limits ("limit") are off` {
			status = 403
		}
		isProblem(t, c.body, post(t, s, "/v1/reserve", c.body), status, c.detail)
	}
	if got := metric(t, s, "ratewarden_decisions_total", `policy="tokens"`); got != 2 {
		t.Errorf("%v decisions of tokens, want the reservation and the check: bad input is no decision", got)
	}
}

func TestReservationSecretsOption(t *testing.T) {
	cfg := server.WithConfig(parseConfig(t, settlePolicies))
	for _, opt := range []server.Option{server.WithReservationSecrets(), server.WithReservationSecrets([]byte("short"))} {
		if _, err := server.New(memBackend(t), cfg, opt); err == nil {
			t.Error("New took a missing or short reservation secret")
		}
	}
	// A new secret first, the old one still accepted: a rotation.
	old := []byte("the old secret, sixteen bytes or more")
	a := start(t, memBackend(t), cfg, server.WithReservationSecrets(old))
	b := start(t, memBackend(t), cfg, server.WithReservationSecrets([]byte("the new secret, sixteen bytes or more"), old))
	_, tok := reserve(t, a, `{"key":"k","policy":"tokens","estimate":3}`)
	wantSettled(t, "a token of the old secret", settle(t, b, tok, 3), 0, 0)
	_, tok = reserve(t, b, `{"key":"k","policy":"tokens","estimate":3}`)
	isProblem(t, "a token of the new secret where only the old one is known", settle(t, a, tok, 3), 400, "not a reservation")
}
