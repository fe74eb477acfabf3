package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/go-redis/v9"
)

func TestNewRejectsBadConfig(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer gr.Close()
	for _, tc := range []struct {
		name string
		make func() (*Store, error)
		want string
	}{
		{"nil rueidis client", func() (*Store, error) { return New(nil) }, "client"},
		{"nil go-redis client", func() (*Store, error) { return NewGoRedis(nil) }, "client"},
		{"open brace", func() (*Store, error) { return New(c, WithPrefix("rw{")) }, "prefix"},
		{"close brace", func() (*Store, error) { return New(c, WithPrefix("}")) }, "prefix"},
		{"nil option", func() (*Store, error) { return New(c, WithPrefix("x:"), nil) }, "option 1 is nil"},
		{"nil option, go-redis", func() (*Store, error) { return NewGoRedis(gr, nil) }, "option 0 is nil"},
		{"batch size", func() (*Store, error) { return New(c, WithBatchSize(0)) }, "batch size must be at least 1, got 0"},
		{"batch lanes", func() (*Store, error) { return NewGoRedis(gr, WithBatchLanes(-1)) }, "batch lanes must be at least 1, got -1"},
		{"replica ack timeout", func() (*Store, error) { return New(c, WithReplicaAck(1, 0)) }, "replica ack needs replicas >= 0 and a timeout >= 1ms, got 1 and 0s"},
		{"replica ack on go-redis", func() (*Store, error) { return NewGoRedis(gr, WithReplicaAck(1, time.Second)) }, "WithReplicaAck needs a rueidis client (New)"},
	} {
		s, err := tc.make()
		if s != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redisstore: ") {
			t.Errorf("%s: %v, %v; want ErrInvalidConfig naming %q", tc.name, s, err, tc.want)
		}
	}
	if _, err := New(c, WithPrefix("")); err != nil {
		t.Errorf("empty prefix: %v", err)
	}
}

func TestKeyFormat(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr, WithPrefix("app:"))
	lim := ratewarden.PerMinute(10)
	long := strings.Repeat("k", MaxKeyLen)
	huge := strings.Repeat("x", 10<<10)
	for _, tc := range []struct {
		key    string
		hashed bool
	}{
		{"user:42", false},
		{"\x00\xff\r\n binary", false},
		{long, false},
		{long + "k", true},
		{huge, true},
		{"{}", true},
		{"a{b", true},
		{"a}b", true},
		{"}{", true},
		{"#tag", true},
		{"a#b", false},
	} {
		k := s.Key(tc.key, lim)
		tag, ok := strings.CutPrefix(k, "app:{")
		if !ok {
			t.Fatalf("Key(%.20q) = %.60q: no prefix", tc.key, k)
		}
		tag, scope, ok := strings.Cut(tag, "}")
		if !ok || scope != "t1m" || strings.ContainsAny(tag, "{}") || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
			t.Fatalf("Key(%.20q) = %.60q: the hash tag is broken", tc.key, k)
		}
		if tc.hashed {
			if len(tag) != 33 || tag[0] != '#' || strings.Trim(tag[1:], "0123456789abcdef") != "" {
				t.Errorf("Key(%.20q): tag %q, want # and 32 hex digits", tc.key, tag)
			}
		} else if tag != tc.key {
			t.Errorf("Key(%.20q): tag %.40q, want the key itself", tc.key, tag)
		}
		// The key works end to end, and the state lands under that name.
		res := make([]ratewarden.Result, 1)
		if err := s.Check(bg, &ratewarden.Request{Key: tc.key, Limits: []ratewarden.Limit{lim}, Cost: 1}, res); err != nil || !res[0].Allowed {
			t.Fatalf("Check(%.20q): %+v, %v", tc.key, res[0], err)
		}
		if got := do(t, srv, "EXISTS", k); got != "1" {
			t.Errorf("after Check(%.20q), EXISTS %.60q = %s", tc.key, k, got)
		}
	}
	// Hashing is deterministic and tells keys apart.
	again := openStore(t, srv.Addr, WithPrefix("app:"))
	if s.Key("a{b", lim) != again.Key("a{b", lim) || s.Key("a{b", lim) == s.Key("a{c", lim) {
		t.Error("hashed tags must be deterministic and distinct")
	}
	if got := do(t, srv, "DBSIZE"); got != "11" {
		t.Errorf("DBSIZE = %s, want 11 (one key per caller key)", got)
	}
}

func FuzzKey(f *testing.F) {
	for _, k := range []string{"user:1", "{", "}", "{}", "#", "#a", "\x00", strings.Repeat("z", 300)} {
		f.Add(k)
	}
	s, err := storeOn(nil)
	if err != nil {
		f.Fatal(err)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: time.Second}
	f.Fuzz(func(t *testing.T, key string) {
		k := s.Key(key, lim)
		rest, ok := strings.CutPrefix(k, DefaultPrefix+"{")
		if !ok {
			t.Fatalf("%q: no prefix", k)
		}
		tag, scope, ok := strings.Cut(rest, "}")
		if !ok || scope != "t1s" || strings.ContainsAny(tag, "{}") || tag == "" {
			t.Fatalf("%q: broken tag", k)
		}
		if len(tag) > MaxKeyLen {
			t.Fatalf("%q: tag longer than %d", k, MaxKeyLen)
		}
		if tag != key && (len(tag) != 33 || tag[0] != '#') {
			t.Fatalf("%q: a changed tag must be a hash", k)
		}
	})
}

func TestContextErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out deadlines on a stalled Redis; make test runs it")
	}
	srv := testredis.Start(t)
	for name, s := range map[string]*Store{"rueidis": openStore(t, srv.Addr), "go-redis": openGoRedisStore(t, srv.Addr)} {
		req := &ratewarden.Request{Key: "ctx", Limits: []ratewarden.Limit{ratewarden.PerSecond(5)}, Cost: 1}
		res := make([]ratewarden.Result, 1)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		err := s.Check(ctx, req, res)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Errorf("%s: canceled: %v; want both context.Canceled and ErrStoreUnavailable", name, err)
		}
		if err := s.Reset(ctx, "ctx", ratewarden.PerSecond(5)); !errors.Is(err, context.Canceled) || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Errorf("%s: Reset canceled: %v", name, err)
		}
		// A deadline that runs out while Redis is stalled (CLIENT PAUSE).
		if err := s.Check(bg, req, res); err != nil {
			t.Fatalf("%s: warm-up: %v", name, err)
		}
		stalledCheck(t, srv, name, s, req, res)
	}
}

// stalledCheck runs a check with a 50 ms deadline while Redis is paused.
// A check that succeeds after the pause ended (a busy machine sent it
// late) proves nothing: then it runs again with a longer pause.
func stalledCheck(t *testing.T, srv *testredis.Server, name string, s *Store, req *ratewarden.Request, res []ratewarden.Result) {
	t.Helper()
	for _, pause := range []time.Duration{400 * time.Millisecond, 2 * time.Second, 8 * time.Second} {
		paused := time.Now()
		do(t, srv, "CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "ALL")
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		err := s.Check(ctx, req, res)
		cancel()
		took := time.Since(paused)
		do(t, srv, "CLIENT", "UNPAUSE") // waits for the pause to end
		if err == nil && took >= pause {
			t.Logf("%s: the check came %v after CLIENT PAUSE %v: again with a longer pause", name, took, pause)
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ratewarden.ErrStoreUnavailable) || !strings.HasPrefix(err.Error(), "redisstore: eval") {
			t.Errorf("%s: stalled: %v; want both context.DeadlineExceeded and ErrStoreUnavailable", name, err)
		}
		return
	}
	t.Errorf("%s: every check came after its CLIENT PAUSE had ended: the machine is too slow for this test", name)
}

func TestRedisErrors(t *testing.T) {
	srv := testredis.Start(t)
	for name, s := range map[string]*Store{"rueidis": openStore(t, srv.Addr), "go-redis": openGoRedisStore(t, srv.Addr)} {
		lim := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: time.Second}
		do(t, srv, "SET", s.Key("wrong", lim), "not a sorted set")
		res := make([]ratewarden.Result, 1)
		err := s.Check(bg, &ratewarden.Request{Key: "wrong", Limits: []ratewarden.Limit{lim}, Cost: 1}, res)
		// The key's own trouble, not the store's, and the key stays out of
		// the message.
		if !errors.Is(err, ratewarden.ErrKeyState) || errors.Is(err, ratewarden.ErrStoreUnavailable) || strings.Contains(err.Error(), "wrong") || !strings.Contains(err.Error(), "redisstore: eval sliding_log:1s: a key of this check holds another type") {
			t.Errorf("%s: wrong type: %v", name, err)
		}
	}
	s := openStore(t, srv.Addr)
	g := openGoRedisStore(t, srv.Addr)
	srv.Kill()
	for name, s := range map[string]*Store{"rueidis": s, "go-redis": g} {
		res := make([]ratewarden.Result, 1)
		if err := s.Check(bg, &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{ratewarden.PerSecond(1)}, Cost: 1}, res); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Errorf("%s: Check on a dead server: %v", name, err)
		}
		if err := s.Reset(bg, "k", ratewarden.PerSecond(1)); !errors.Is(err, ratewarden.ErrStoreUnavailable) || !strings.HasPrefix(err.Error(), "redisstore: reset: ") {
			t.Errorf("%s: Reset on a dead server: %v", name, err)
		}
	}
}

func openGoRedisStore(tb testing.TB, addr string, opts ...Option) *Store {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	s, err := NewGoRedis(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestSlot checks Slot against Redis itself: CLUSTER KEYSLOT, on a
// redis-server in cluster mode, of the keys the store writes for each
// caller key (a rate limit's, with the default prefix and with another,
// and the permits'), for plain keys, keys that would break the hash tag
// and are hashed into it ({, }, a leading #, longer than MaxKeyLen), and
// odd bytes. Three slots are also pinned to values from Redis' own
// documentation and the XMODEM check value, so that a server and Slot
// agreeing on a wrong hash would still fail.
func TestSlot(t *testing.T) {
	srv := testredis.Start(t, "--cluster-enabled", "yes")
	keyslot := func(k string) int {
		t.Helper()
		out, err := srv.Do("CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		n, err := strconv.Atoi(out)
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q = %q", k, out)
		}
		return n
	}
	for key, want := range map[string]int{
		"123456789": 12739, // CRC-16/XMODEM check value 0x31c3
		"somekey":   11058, // CLUSTER KEYSLOT somekey, in Redis' documentation
		"hash_tag":  2515,  // CLUSTER KEYSLOT foo{hash_tag}, ditto
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
		if got := keyslot("x{" + key + "}y"); got != want {
			t.Errorf("CLUSTER KEYSLOT x{%s}y = %d, want %d: the pinned value is wrong", key, got, want)
		}
	}
	plain, err := storeOn(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := storeOn(nil, WithPrefix("app:limits:"))
	if err != nil {
		t.Fatal(err)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: time.Second, Burst: 9}
	keys := []string{
		"user:42", "a", "0", "tenant:7/route:checkout", "ключ", "key with spaces", "tab\tand\nnewline", "nul\x00byte", "\xff\xfe",
		"{", "}", "{x}", "a{b}c", "}{", "{}", "x{}", "#", "#abc", "a#b",
		strings.Repeat("k", MaxKeyLen), strings.Repeat("k", MaxKeyLen+1), strings.Repeat("{", 300),
	}
	seen := map[int]bool{}
	for _, k := range keys {
		got := Slot(k)
		seen[got] = true
		for _, stored := range []string{plain.Key(k, lim), other.Key(k, ratewarden.PerHour(3)), plain.PermitKey(k)} {
			if want := keyslot(stored); got != want {
				t.Errorf("Slot(%q) = %d; Redis puts its key %q in slot %d", k, got, stored, want)
			}
		}
	}
	if len(seen) < len(keys)-2 {
		t.Errorf("%d keys in %d slots: want them spread", len(keys), len(seen))
	}
}

// TestKeyLayout pins key format 2: one letter per algorithm, the period in
// its largest whole unit or in bare milliseconds, and distinct names for
// every scope.
func TestKeyLayout(t *testing.T) {
	s, err := storeOn(nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]ratewarden.Limit{}
	for _, tc := range []struct {
		lim  ratewarden.Limit
		want string
	}{
		{ratewarden.PerMinute(100), "rw:{u}t1m"}, // the default: a token bucket
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Minute}, "rw:{u}s1m"},
		{ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Minute}, "rw:{u}f1m"},
		{ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: time.Second, Burst: 9}, "rw:{u}t1s"},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: time.Hour}, "rw:{u}l1h"},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: 24 * time.Hour}, "rw:{u}s1d"},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: 48 * time.Hour}, "rw:{u}s2d"},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: 90 * time.Minute}, "rw:{u}s90m"},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: 90 * time.Second}, "rw:{u}s90s"},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: 1500 * time.Millisecond}, "rw:{u}s1500"},
		{ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 5, Period: time.Millisecond}, "rw:{u}s1"},
		{ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: ratewarden.MaxPeriod}, "rw:{u}f366d"},
	} {
		got := s.Key("u", tc.lim)
		if got != tc.want {
			t.Errorf("Key(u, %v) = %q, want %q", tc.lim, got, tc.want)
		}
		if o, dup := seen[got]; dup && o.Scope() != tc.lim.Scope() {
			t.Errorf("%v and %v share the key %q", o, tc.lim, got)
		}
		seen[got] = tc.lim
	}
	if KeyFormat != 2 {
		t.Errorf("KeyFormat = %d: a new format needs new algorithm letters and an upgrade note in docs/redis.md", KeyFormat)
	}
}
