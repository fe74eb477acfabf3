package backend_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/service/internal/backend"
)

// closedPort is a loopback port nothing listens on: a dial is refused at
// once.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return port
}

// TestOneURLGrammar: the library (redisstore.ParseURL), serve (NewRedis)
// and demo (redisstore.ClientFromURL) read the same strings the same way:
// every form docs/operations.md shows, and rueidis' own forms, is accepted
// by all three (only the connection fails, nothing listens there), and a
// bad URL is refused by all three with an error naming the problem.
func TestOneURLGrammar(t *testing.T) {
	p1, p2, p3 := closedPort(t), closedPort(t), closedPort(t)
	valid := []string{
		"redis://127.0.0.1:" + p1,
		"redis://127.0.0.1:" + p1 + "/0?dial_timeout=1s&client_name=api",
		"redis://127.0.0.1:" + p1 + ",127.0.0.1:" + p2 + ",127.0.0.1:" + p3, // Cluster seeds
		"redis://127.0.0.1:" + p1 + "?addr=127.0.0.1:" + p2,                 // the same, rueidis' form
		"redis-sentinel://127.0.0.1:" + p1 + ",127.0.0.1:" + p2 + "/mymaster",
		"redis://127.0.0.1:" + p1 + "?master_set=mymaster", // Sentinel, rueidis' form
		"redis://user:secret@127.0.0.1:" + p1,
	}
	for _, u := range valid {
		if _, err := redisstore.ParseURL(u); err != nil {
			t.Errorf("library: ParseURL(%q): %v", u, err)
		}
		if r, err := backend.NewRedis(u); !errors.Is(err, ratewarden.ErrStoreUnavailable) || errors.Is(err, ratewarden.ErrInvalidConfig) {
			if r != nil {
				r.Close()
			}
			t.Errorf("serve: backend.NewRedis(%q) = %v; want the URL accepted and the connection refused (ErrStoreUnavailable)", u, err)
		}
		if c, err := redisstore.ClientFromURL(u); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			if c != nil {
				c.Close()
			}
			t.Errorf("demo: ClientFromURL(%q) = %v; want the URL accepted and the connection refused", u, err)
		}
	}
	invalid := map[string]string{
		"redis://127.0.0.1:" + p1 + "?pool=3":                    `unknown parameter "pool"`,
		"http://127.0.0.1:" + p1:                                 `unknown scheme "http"`,
		"redis-sentinel://127.0.0.1:" + p1:                       "master set",
		"redis://user:secret@127.0.0.1:" + p1 + "?db=x":          "database number",
		"redis://127.0.0.1:" + p1 + "?master_set=a&master_set=b": "master_set",
	}
	for u, want := range invalid {
		_, lerr := redisstore.ParseURL(u)
		_, serr := backend.NewRedis(u)
		_, derr := redisstore.ClientFromURL(u)
		for who, err := range map[string]error{"library": lerr, "serve": serr, "demo": derr} {
			if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: %q: %v; want ErrInvalidConfig naming %q, without the password", who, u, err, want)
			}
		}
	}
}

// TestNewRedisConnects: a standalone URL in the library's form reaches a
// real redis-server and decides there.
func TestNewRedisConnects(t *testing.T) {
	srv := testredis.Start(t)
	r, err := backend.NewRedis("redis://" + srv.Addr + "/0?client_name=ratewarden-test")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := srv.Do("CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "name=ratewarden-test") {
		t.Errorf("CLIENT LIST shows no connection named ratewarden-test:\n%s", out)
	}
}
