package peerdiff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// jsonCases are /json requests, in order (the later ones count on the
// earlier ones' hits), for both services.
var jsonCases = []struct{ name, body string }{
	{"allowed", `{"domain":"edge2","descriptors":[{"entries":[{"key":"emp","value":"x"}]}]}`},
	{"key only", `{"domain":"edge2","descriptors":[{"entries":[{"key":"emp","value":"a"}]}]}`},
	{"two descriptors", `{"domain":"edge2","descriptors":[{"entries":[{"key":"any","value":"v"}]},{"entries":[{"key":"cfg","value":"c"}]}]}`},
	{"hits addend", `{"domain":"edge2","hitsAddend":2,"descriptors":[{"entries":[{"key":"any","value":"w"}]}]}`},
	{"over the limit", `{"domain":"edge2","hitsAddend":2,"descriptors":[{"entries":[{"key":"any","value":"w"}]}]}`},
	{"unknown domain", `{"domain":"nowhere","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`},
	{"no match", `{"domain":"edge2","descriptors":[{"entries":[{"key":"zzz","value":"b"}]}]}`},
	{"not JSON", `{"domain":`},
	{"unknown field", `{"domain":"edge2","nope":true}`},
	{"empty body", ``},
}

// jsonAnswer is a /json answer in comparable parts: the status, the
// content type and the body (JSON decoded; else the text), with
// durationUntilReset rounded to tens of seconds (the answers are
// milliseconds apart, a window edge aside).
type jsonAnswer struct {
	Status int
	Type   string
	Body   any
}

func askJSON(t *testing.T, addr, body string) jsonAnswer {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/json", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := jsonAnswer{Status: resp.StatusCode, Type: resp.Header.Get("Content-Type")}
	var v map[string]any
	if json.Unmarshal(b, &v) != nil {
		a.Body = string(b)
		return a
	}
	if sts, ok := v["statuses"].([]any); ok {
		for _, s := range sts {
			m := s.(map[string]any)
			if d, ok := m["durationUntilReset"].(string); ok {
				if dd, err := time.ParseDuration(d); err == nil {
					m["durationUntilReset"] = fmt.Sprint(dd.Round(10 * time.Second))
				}
			}
		}
	}
	a.Body = v
	return a
}

// TestJSONSideBySide sends the same /json requests to both services and
// compares status codes, content types and bodies.
func TestJSONSideBySide(t *testing.T) {
	bin := t.TempDir()
	peerBin, ourBin := build(t, bin)
	peerRedis, ourRedis := testredis.Start(t), testredis.Start(t)
	rt := t.TempDir()
	cfgDir := filepath.Join(rt, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "edge.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	pg, ph, pd := freeAddr(t), freeAddr(t), freeAddr(t)
	pc := exec.Command(peerBin)
	pc.Env = []string{"PATH=" + os.Getenv("PATH"), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + peerRedis.Addr, "RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT=" + port(pg), "PORT=" + port(ph), "DEBUG_PORT=" + port(pd)}
	og, oh := freeAddr(t), freeAddr(t)
	// ratewarden with the peer's own environment, but its Redis and
	// envoyproxy/ratelimit's default of no headers (ratewarden's default
	// sends them: a listed difference).
	oc := exec.Command(ourBin, "serve")
	oc.Env = []string{"PATH=" + os.Getenv("PATH"), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + ourRedis.Addr, "RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(og), "PORT=" + port(oh), "REDIS_TIMEOUT=5s",
		"RATEWARDEN_RLS_HEADERS=none"} // its default headers differ on purpose
	startProc(t, "envoyproxy-ratelimit", pc, pg, nil)
	startProc(t, "ratewarden", oc, og, nil)
	defer http.DefaultClient.CloseIdleConnections()
	if s := time.Now().Second(); s > 40 { // minute windows: stay in one
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	for _, c := range jsonCases {
		a, b := askJSON(t, ph, c.body), askJSON(t, oh, c.body)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s:\n  envoyproxy/ratelimit: %+v\n  ratewarden:           %+v", c.name, a, b)
		}
	}
	// /healthcheck.
	for _, addr := range []string{ph, oh} {
		resp, err := http.Get("http://" + addr + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "OK" {
			t.Errorf("%s /healthcheck: %d %q", addr, resp.StatusCode, body)
		}
	}
}
