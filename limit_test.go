package ratewarden_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

func TestValidate(t *testing.T) {
	const sec = time.Second
	tests := []struct {
		name string
		l    ratewarden.Limit
		msg  string // the detail: "ratewarden: <msg>: <ErrInvalidLimit>"
	}{
		{"algorithm", ratewarden.Limit{Algorithm: 9, Rate: 1, Period: sec}, "unknown algorithm 9"},
		{"rate zero", ratewarden.Limit{Period: sec}, "rate must be > 0, got 0"},
		{"rate negative", ratewarden.Limit{Rate: -3, Period: sec}, "rate must be > 0, got -3"},
		{"rate too big", ratewarden.Limit{Rate: ratewarden.MaxRate + 1, Period: sec}, "rate must be <= 1000000000000, got 1000000000001"},
		{"sliding_log rate", ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 10_001, Period: sec}, "rate of a sliding_log limit must be <= 10000 (memory per key), got 10001"},
		{"period zero", ratewarden.Limit{Rate: 1}, "period must be > 0, got 0s"},
		{"period negative", ratewarden.Limit{Rate: 1, Period: -sec}, "period must be > 0, got -1s"},
		{"period too short", ratewarden.Limit{Rate: 1, Period: 500 * time.Microsecond}, "period must be at least 1ms, got 500µs"},
		{"period fraction", ratewarden.Limit{Rate: 1, Period: 1500500 * time.Microsecond}, "period must be a whole number of milliseconds, got 1.5005s"},
		{"period too long", ratewarden.Limit{Rate: 1, Period: ratewarden.MaxPeriod + time.Millisecond}, "period must be at most 8784h0m0s, got 8784h0m0.001s"},
		{"burst negative", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: sec, Burst: -1}, "burst must be >= 0, got -1"},
		{"burst on fixed_window", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: sec, Burst: 2}, "burst applies only to token_bucket, got burst 2 with fixed_window"},
		{"burst too big", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: sec, Burst: ratewarden.MaxRate + 1}, "burst must be <= 1000000000000, got 1000000000001"},
		{"token_bucket rate per µs", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1001, Period: time.Millisecond}, "rate of a token_bucket limit must be at most one per microsecond, got 1001 per 1ms (name a window algorithm for more, e.g. \"1001/1ms fixed_window\")"},
		{"token_bucket refill time", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour, Burst: 8785}, "burst × period / rate of a token_bucket limit (the time to refill a full bucket) must be at most 8784h0m0s, got burst 8785, 1 per 1h0m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate()
			if !errors.Is(err, ratewarden.ErrInvalidLimit) {
				t.Fatalf("Validate(%#v) = %v, want ErrInvalidLimit", tc.l, err)
			}
			if want := "ratewarden: " + tc.msg + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Validate(%#v) = %q, want it to start with %q", tc.l, err, want)
			}
		})
	}
	for _, l := range []ratewarden.Limit{
		ratewarden.PerSecond(1), ratewarden.PerDay(86_400_000_000), // one per µs
		{Algorithm: ratewarden.FixedWindow, Rate: ratewarden.MaxRate, Period: 24 * time.Hour},
		{Algorithm: ratewarden.SlidingLog, Rate: ratewarden.MaxLogRate, Period: ratewarden.MaxPeriod},
		{Algorithm: ratewarden.TokenBucket, Rate: 1000, Period: ratewarden.MinPeriod, Burst: ratewarden.MaxRate},
		{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: 1500 * time.Millisecond},
	} {
		if err := l.Validate(); err != nil {
			t.Errorf("Validate(%v) = %v, want nil", l, err)
		}
	}
}

func TestHelpers(t *testing.T) {
	for _, c := range []struct {
		got  ratewarden.Limit
		want time.Duration
	}{
		{ratewarden.PerSecond(3), time.Second},
		{ratewarden.PerMinute(3), time.Minute},
		{ratewarden.PerHour(3), time.Hour},
		{ratewarden.PerDay(3), 24 * time.Hour},
	} {
		want := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: c.want} // DefaultAlgorithm
		if c.got != want {
			t.Errorf("got %#v, want %#v", c.got, want)
		}
	}
	if got := (ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Burst: 9}).Capacity(); got != 9 {
		t.Errorf("token bucket Capacity = %d, want Burst 9", got)
	}
	if got := (ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5}).Capacity(); got != 5 {
		t.Errorf("token bucket without burst: Capacity = %d, want Rate 5", got)
	}
	if got := ratewarden.PerMinute(7).Capacity(); got != 7 {
		t.Errorf("Capacity = %d, want 7", got)
	}
	if got := (ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: 90 * time.Second}).Scope(); got != "fixed_window:90s" {
		t.Errorf("Scope = %q", got)
	}
	if got := (ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Hour, Burst: 3}).Scope(); got != "token_bucket:1h" {
		t.Errorf("Scope = %q, want token_bucket:1h (rate and burst are not part of it)", got)
	}
}

var parseTests = []struct {
	in   string
	want ratewarden.Limit
	str  string // canonical String form
}{
	{"100/1m", ratewarden.PerMinute(100), "100/1m"},
	{"10/1s burst 20 token_bucket", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}, "10/1s burst 20"},
	{"10/1s token_bucket burst 20", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}, "10/1s burst 20"},
	{"10/1s burst 20", ratewarden.Limit{Rate: 10, Period: time.Second, Burst: 20}, "10/1s burst 20"},
	{"5/1500ms fixed_window", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: 1500 * time.Millisecond}, "5/1500ms fixed_window"},
	{"1/m", ratewarden.PerMinute(1), "1/1m"},
	{"3/60s", ratewarden.PerMinute(3), "3/1m"},
	{"4/1000ms", ratewarden.PerSecond(4), "4/1s"},
	{"1/24h", ratewarden.PerDay(1), "1/1d"},
	{"7/90s", ratewarden.Limit{Rate: 7, Period: 90 * time.Second}, "7/90s"},
	{"2/d sliding_log", ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 2, Period: 24 * time.Hour}, "2/1d sliding_log"},
	{"  9/2h \t sliding_window ", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 9, Period: 2 * time.Hour}, "9/2h sliding_window"},
	{"6/1ms token_bucket", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 6, Period: time.Millisecond}, "6/1ms"},
	{"1/366d", ratewarden.Limit{Rate: 1, Period: ratewarden.MaxPeriod}, "1/366d"},
	// One default at every rate: 99 and 100 are the same algorithm.
	{"99/1m", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 99, Period: time.Minute}, "99/1m"},
	{"100/1m", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Minute}, "100/1m"},
	{"100/1m sliding_log", ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Minute}, "100/1m sliding_log"},
	{"1000000/1s fixed_window", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1_000_000, Period: time.Second}, "1000000/1s fixed_window"},
}

func TestParseLimit(t *testing.T) {
	for _, tc := range parseTests {
		l, err := ratewarden.ParseLimit(tc.in)
		if err != nil || l != tc.want {
			t.Errorf("ParseLimit(%q) = %#v, %v; want %#v", tc.in, l, err, tc.want)
			continue
		}
		if s := l.String(); s != tc.str {
			t.Errorf("String() = %q, want %q", s, tc.str)
		}
		if back, err := ratewarden.ParseLimit(l.String()); err != nil || back != l {
			t.Errorf("ParseLimit(%q) = %#v, %v; want the round trip to give %#v", l.String(), back, err, l)
		}
	}
}

func TestParseLimitErrors(t *testing.T) {
	tests := []struct{ in, msg string }{
		{"", "empty limit string"},
		{"   ", "empty limit string"},
		{"100", `"100": want <rate>/<period>`},
		{"x/1m", `rate "x": not a whole number`},
		{"-1/1m", `rate "-1": not a whole number`},
		{"/1m", `rate "": missing number`},
		{"99999999999999999999/1s", "out of range"},
		{"100/1w", `period "1w": unknown unit "w"`},
		{"100/", `period "": unknown unit ""`},
		{"100/1.5s", `period "1.5s": unknown unit ".5s"`},
		{"100/367d", `period "367d": longer than 8784h0m0s`},
		{"100/1m burst", "burst needs a number"},
		{"100/1m burst x token_bucket", `burst "x": not a whole number`},
		{"10/1m burst 2 burst 3 token_bucket", "burst given twice"},
		{"100/1m fixed_window sliding_log", "algorithm given twice"},
		{"100/1m banana", `unexpected "banana"`},
		{"0/1m", "rate must be > 0, got 0"},
		{"1/0s", "period must be > 0"},
		{"1/1m burst 5 sliding_window", "burst applies only to token_bucket"},
		{"2000000/1s", "rate of a token_bucket limit must be at most one per microsecond"},
		{"20000/1s sliding_log", "rate of a sliding_log limit must be <= 10000"},
	}
	for _, tc := range tests {
		l, err := ratewarden.ParseLimit(tc.in)
		if !errors.Is(err, ratewarden.ErrInvalidLimit) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseLimit(%q) = %v, %v; want ErrInvalidLimit mentioning %q", tc.in, l, err, tc.msg)
		}
		if l != (ratewarden.Limit{}) {
			t.Errorf("ParseLimit(%q) returned %#v with an error, want the zero Limit", tc.in, l)
		}
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, tc := range parseTests {
		f.Add(tc.in)
	}
	for _, s := range []string{"", "1/1ms", "100/1m burst 20", "5/7d token_bucket burst 0", "1/0ms", "10/s fixed_window"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ratewarden.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, ratewarden.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q): error %v does not wrap ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %#v, which fails Validate: %v", s, l, err)
		}
		str := l.String()
		back, err := ratewarden.ParseLimit(str)
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %#v; String %q parses to %#v, %v", s, l, str, back, err)
		}
		if back.String() != str {
			t.Fatalf("String not stable: %q then %q", str, back.String())
		}
		text, err := l.MarshalText()
		if err != nil || string(text) != str {
			t.Fatalf("MarshalText = %q, %v; want %q", text, err, str)
		}
	})
}

func TestLimitText(t *testing.T) {
	type config struct {
		Limit ratewarden.Limit     `json:"limit"`
		Alg   ratewarden.Algorithm `json:"alg"`
	}
	var c config
	if err := json.Unmarshal([]byte(`{"limit":"10/1s burst 20","alg":"sliding_log"}`), &c); err != nil {
		t.Fatal(err)
	}
	want := config{Limit: ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}, Alg: ratewarden.SlidingLog}
	if c != want {
		t.Fatalf("unmarshalled %#v, want %#v", c, want)
	}
	b, err := json.Marshal(c)
	if err != nil || string(b) != `{"limit":"10/1s burst 20","alg":"sliding_log"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	if err := json.Unmarshal([]byte(`{"limit":"10/1s burst"}`), &c); !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Fatalf("bad limit text: %v, want ErrInvalidLimit", err)
	}
	if c.Limit != want.Limit {
		t.Fatalf("failed UnmarshalText changed the limit to %#v", c.Limit)
	}
	if err := json.Unmarshal([]byte(`{"alg":"leaky_bucket"}`), &c); !errors.Is(err, ratewarden.ErrInvalidLimit) ||
		!strings.Contains(err.Error(), `unknown algorithm "leaky_bucket" (want one of token_bucket, sliding_window, fixed_window, sliding_log)`) {
		t.Fatalf("bad algorithm text: %v", err)
	}
	if _, err := (ratewarden.Limit{Rate: 1}).MarshalText(); !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Fatalf("MarshalText of an invalid limit: %v, want ErrInvalidLimit", err)
	}
	if _, err := ratewarden.Algorithm(7).MarshalText(); !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Fatalf("MarshalText of Algorithm(7): %v, want ErrInvalidLimit", err)
	}
}

func TestAlgorithmString(t *testing.T) {
	for a, want := range map[ratewarden.Algorithm]string{
		ratewarden.SlidingWindow: "sliding_window", ratewarden.FixedWindow: "fixed_window",
		ratewarden.TokenBucket: "token_bucket", ratewarden.SlidingLog: "sliding_log", 4: "Algorithm(4)",
	} {
		if got := a.String(); got != want {
			t.Errorf("Algorithm(%d).String() = %q, want %q", a, got, want)
		}
		if a < 4 {
			if back, err := ratewarden.ParseAlgorithm(want); err != nil || back != a {
				t.Errorf("ParseAlgorithm(%q) = %v, %v", want, back, err)
			}
		}
	}
	var zero ratewarden.Algorithm
	if zero != ratewarden.DefaultAlgorithm || ratewarden.DefaultAlgorithm != ratewarden.TokenBucket {
		t.Errorf("zero Algorithm is %v, want token_bucket, the default", zero)
	}
}

// TestOneDefaultForEveryRate: a limit that names no algorithm — the zero
// Algorithm of a struct, the helpers, ParseLimit and UnmarshalText — is
// the same algorithm, with the same Scope (the key), at every rate, so a
// rate change never moves a key's state.
func TestOneDefaultForEveryRate(t *testing.T) {
	rates := []int64{1, 2, 5, 59, 60, 99, 100, 101, 999, 1000, 10_000, 10_001, 1_000_000}
	for _, r := range rates {
		for _, p := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
			byStruct := ratewarden.Limit{Rate: r, Period: p}
			if byStruct.Validate() != nil {
				continue // a token bucket takes at most one unit per µs
			}
			var byHelper ratewarden.Limit
			switch p {
			case time.Second:
				byHelper = ratewarden.PerSecond(r)
			case time.Minute:
				byHelper = ratewarden.PerMinute(r)
			case time.Hour:
				byHelper = ratewarden.PerHour(r)
			default:
				byHelper = ratewarden.PerDay(r)
			}
			byParse, err := ratewarden.ParseLimit(byStruct.String())
			if err != nil {
				t.Fatalf("ParseLimit(%q): %v", byStruct.String(), err)
			}
			var byText ratewarden.Limit
			if err := byText.UnmarshalText([]byte(byStruct.String())); err != nil {
				t.Fatal(err)
			}
			for _, l := range []ratewarden.Limit{byHelper, byParse, byText} {
				if l != byStruct || l.Algorithm != ratewarden.DefaultAlgorithm {
					t.Errorf("%d per %v: %#v, want %#v (the zero Algorithm)", r, p, l, byStruct)
				}
			}
			if s, first := byStruct.Scope(), (ratewarden.Limit{Rate: 1, Period: p}).Scope(); s != first {
				t.Errorf("%d per %v: scope %s, at rate 1 %s: a rate change would move the key", r, p, s, first)
			}
		}
	}
}
