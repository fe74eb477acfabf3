package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/service/server"
)

// notifyBound is how long a notified reload may take in these tests: far
// above the ~50 ms it takes (the watcher's quiet and settle delays), far
// below the one-hour polling interval the tests set, so only a
// notification can have done it.
const notifyBound = 5 * time.Second

// waitRate waits until the server's policy "api" has rate want and
// returns how long that took from since.
func waitRate(t *testing.T, s *server.Server, want int64, since time.Time) time.Duration {
	t.Helper()
	deadline := since.Add(notifyBound)
	for {
		if p := s.Config().Policies["api"]; p != nil && p.Limit.Rate == want {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rate %d not loaded %v after the edit (polling is hourly: no notification?)", want, notifyBound)
		}
		time.Sleep(time.Millisecond)
	}
}

func policy(rate int) string { return fmt.Sprintf("policies:\n  api: %d/1h fixed_window\n", rate) }

// TestReloadByNotification: with polling hourly, 20 edits (renames over
// the file and in-place writes, alternately) are each loaded by a
// filesystem notification; the test logs how long each took (p50, p99).
// A broken edit keeps the configuration in force and is counted.
func TestReloadByNotification(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "policies.yaml")
	writeFile(t, f, policy(1))
	s := start(t, memBackend(t), server.WithConfigPaths(dir), server.WithReloadInterval(time.Hour))
	var took []time.Duration
	for i := 2; i <= 21; i++ {
		if i%2 == 0 {
			writeFile(t, f, policy(i)) // a new file renamed over the old
		} else if err := os.WriteFile(f, []byte(policy(i)), 0o600); err != nil { // in place
			t.Fatal(err)
		}
		took = append(took, waitRate(t, s, int64(i), time.Now()))
	}
	slices.Sort(took)
	t.Logf("20 edits: reload after p50 %v, p99 (max) %v", took[len(took)/2], took[len(took)-1])

	before := metric(t, s, "ratewarden_config_reloads_total", `result="failure"`)
	writeFile(t, f, "policies:\n  api: {rate: -1}\n")
	deadline := time.Now().Add(notifyBound)
	for metric(t, s, "ratewarden_config_reloads_total", `result="failure"`) == before {
		if time.Now().After(deadline) {
			t.Fatalf("a broken edit was not noticed within %v", notifyBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.Config().Policies["api"].Limit.Rate; got != 21 {
		t.Fatalf("a broken edit replaced the configuration: rate %d", got)
	}
}

// TestReloadConfigMapSwap: a Kubernetes ConfigMap volume's update (a new
// timestamped directory, the ..data symlink swapped to it by a rename,
// the old directory removed) is loaded by notification, whether the
// service was given the mount directory or the file's symlink in it.
func TestReloadConfigMapSwap(t *testing.T) {
	for _, byFile := range []bool{false, true} {
		t.Run(fmt.Sprintf("file path %v", byFile), func(t *testing.T) {
			mount := t.TempDir()
			version := func(n int) {
				t.Helper()
				ts := filepath.Join(mount, fmt.Sprintf("..2026_12_02_%02d", n))
				if err := os.Mkdir(ts, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(ts, "config.yaml"), []byte(policy(n)), 0o600); err != nil {
					t.Fatal(err)
				}
				tmp := filepath.Join(mount, "..data_tmp")
				if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, filepath.Join(mount, "..data")); err != nil {
					t.Fatal(err)
				}
				if n > 1 {
					if err := os.RemoveAll(filepath.Join(mount, fmt.Sprintf("..2026_12_02_%02d", n-1))); err != nil {
						t.Fatal(err)
					}
				}
			}
			version(1)
			if err := os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(mount, "config.yaml")); err != nil {
				t.Fatal(err)
			}
			path := mount
			if byFile {
				path = filepath.Join(mount, "config.yaml")
			}
			s := start(t, memBackend(t), server.WithConfigPaths(path), server.WithReloadInterval(time.Hour))
			for n := 2; n <= 4; n++ {
				version(n)
				took := waitRate(t, s, int64(n), time.Now())
				t.Logf("swap %d loaded after %v", n, took)
			}
		})
	}
}

// TestReloadSkipsHalfWritten: a file truncated and then filled in two
// writes a millisecond apart is loaded whole; what the first write left
// (a valid file with another rate) is never loaded, since the watcher
// waits for the files to settle. When the machine is too busy to make
// the writes close together the check is skipped, and says so.
func TestReloadSkipsHalfWritten(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "policies.yaml")
	writeFile(t, f, policy(1))
	s := start(t, memBackend(t), server.WithConfigPaths(dir), server.WithReloadInterval(time.Hour))
	full := "policies:\n  api: 70/1h fixed_window\n"
	half := full[:len("policies:\n  api: 7")] + "/1h fixed_window\n" // rate 7: the first half, valid on its own
	fh, err := os.OpenFile(f, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err1 := fh.WriteAt([]byte(half), 0)
	time.Sleep(time.Millisecond)
	_, err2 := fh.WriteAt([]byte(full), 0)
	gap := time.Since(start)
	if err := fh.Close(); err1 != nil || err2 != nil || err != nil {
		t.Fatal(err1, err2, err)
	}
	seen7 := false
	deadline := time.Now().Add(notifyBound)
	for {
		p := s.Config().Policies["api"]
		seen7 = seen7 || p.Limit.Rate == 7
		if p.Limit.Rate == 70 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the full file was not loaded within %v (rate %d)", notifyBound, p.Limit.Rate)
		}
		time.Sleep(time.Millisecond)
	}
	switch {
	case gap > 10*time.Millisecond:
		t.Logf("the two writes were %v apart (a busy machine): the half-written check is skipped", gap)
	case seen7:
		t.Errorf("the half-written file (rate 7) was loaded; the writes were %v apart", gap)
	}
}
