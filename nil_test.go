package ratewarden_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/denycache"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
)

// TestNilStoreFromFailedConstructor follows a program that ignores the
// errors of a failed start: Redis is not listening, so rueidis.NewClient
// fails and redisstore.New gets a nil client; the nil *redisstore.Store it
// returns is then handed to ratewarden.New, which must refuse it with
// ErrInvalidConfig instead of panicking on the first Allow.
func TestNilStoreFromFailedConstructor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused

	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err == nil {
		client.Close()
		t.Fatalf("rueidis.NewClient(%s) succeeded with nothing listening", addr)
	}
	store, err := redisstore.New(client)
	if !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Fatalf("redisstore.New(nil client) error = %v, want ErrInvalidConfig", err)
	}
	lim, err := ratewarden.New(store)
	if !errors.Is(err, ratewarden.ErrInvalidConfig) || lim != nil {
		t.Fatalf("ratewarden.New(nil *redisstore.Store) = %v, %v; want nil, ErrInvalidConfig", lim, err)
	}
	// The failed dial leaves a rueidis goroutine sleeping out its retry
	// delay (about a second), longer than TestMain's goleak check waits:
	// let it end here. It is rueidis' own and ends by itself, so a machine
	// too slow for the wait is no failure of this test.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if goleak.Find() == nil {
			break
		}
	}
}

// TestTypedNilRefused: every constructor and option that takes an
// interface refuses both a nil interface and a typed nil inside one.
func TestTypedNilRefused(t *testing.T) {
	var (
		nilRedis   *redisstore.Store
		nilMem     *memstore.Store
		nilFB      *fallback.Store
		nilDeny    *denycache.Store
		nilRueidis rueidis.Client
		nilGoRedis *redis.Client
	)
	anyKey := func(string) int { return 0 }
	cases := []struct {
		name string
		make func() error
	}{
		{"ratewarden.New(nil)", func() error { _, err := ratewarden.New(nil); return err }},
		{"ratewarden.New(nil *redisstore.Store)", func() error { _, err := ratewarden.New(nilRedis); return err }},
		{"ratewarden.New(nil *memstore.Store)", func() error { _, err := ratewarden.New(nilMem); return err }},
		{"ratewarden.New(nil *fallback.Store)", func() error { _, err := ratewarden.New(nilFB); return err }},
		{"ratewarden.New(nil *denycache.Store)", func() error { _, err := ratewarden.New(nilDeny); return err }},
		{"fallback.New(nil *redisstore.Store)", func() error { _, err := fallback.New(nilRedis); return err }},
		{"fallback.NewPartitioned(nil *redisstore.Store)", func() error { _, err := fallback.NewPartitioned(nilRedis, 2, anyKey); return err }},
		{"fallback.WithLocalStore(nil *memstore.Store)", func() error {
			m, err := memstore.New()
			if err != nil {
				return err
			}
			_, err = fallback.New(m, fallback.WithLocalStore(nilMem))
			return err
		}},
		{"denycache.New(nil *redisstore.Store)", func() error { _, err := denycache.New(nilRedis); return err }},
		{"redisstore.New(nil)", func() error { _, err := redisstore.New(nilRueidis); return err }},
		{"redisstore.NewGoRedis(nil *redis.Client)", func() error { _, err := redisstore.NewGoRedis(nilGoRedis); return err }},
		{"lease.New(nil)", func() error { _, err := lease.New(nil); return err }},
		{"redisstore.NewLender(nil)", func() error { _, err := redisstore.NewLender(nil); return err }},
	}
	for _, c := range cases {
		err := c.make()
		if !errors.Is(err, ratewarden.ErrInvalidConfig) {
			t.Errorf("%s: error = %v, want ErrInvalidConfig", c.name, err)
		}
	}
}
