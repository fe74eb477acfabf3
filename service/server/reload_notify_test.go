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

// halfWrittenWindow is how long a half-written file may stay on disk for
// the test to count it: the watcher loads a changed file only once two
// reads settleDelay (35 ms, watch.go) apart, with no event between, find
// the same contents, so a state that lasted less than that can never be
// loaded. 30 ms leaves 5 ms to spare.
const halfWrittenWindow = 30 * time.Millisecond

// TestReloadSkipsHalfWritten: a file truncated and then filled in two
// writes is loaded whole; what the truncation and the first write left (an
// empty file, then a valid file with another rate) is never loaded, since
// the watcher waits for the files to settle. The writes come 1 ms apart
// (the watcher sees one burst of events and reads after it) and 20 ms
// apart (past the watcher's 15 ms quiet delay: it reads the half-written
// file, and must wait for it to settle rather than load it). A round
// counts only when the truncation and the second write were less than
// halfWrittenWindow apart; a busy machine can stretch a round past it, so
// rounds go on until each gap has 2 that count, or the test fails after
// 40 rounds. A round fails when its config reloads (successful or not)
// are not exactly the one of the whole file.
func TestReloadSkipsHalfWritten(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "policies.yaml")
	writeFile(t, f, policy(1))
	s := start(t, memBackend(t), server.WithConfigPaths(dir), server.WithReloadInterval(time.Hour))
	waitRate(t, s, 1, time.Now())
	counted := map[time.Duration]int{}
	var late []string
	for round := 0; counted[time.Millisecond] < 2 || counted[20*time.Millisecond] < 2; round++ {
		if round == 40 {
			t.Fatalf("in 40 rounds, %d with writes 1 ms apart and %d with writes 20 ms apart were done within %v (want 2 of each); too late: %v",
				counted[time.Millisecond], counted[20*time.Millisecond], halfWrittenWindow, late)
		}
		pause := time.Millisecond
		if round%2 == 1 {
			pause = 20 * time.Millisecond
		}
		// Rate h is the first half of rate 10h's file: valid on its own.
		h := round + 2
		half, full := policy(h), policy(10*h)
		succ := metric(t, s, "ratewarden_config_reloads_total", `result="success"`)
		fail := metric(t, s, "ratewarden_config_reloads_total", `result="failure"`)
		begin := time.Now()
		fh, err := os.OpenFile(f, os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		_, err1 := fh.WriteAt([]byte(half), 0)
		time.Sleep(pause)
		_, err2 := fh.WriteAt([]byte(full), 0)
		window := time.Since(begin)
		if err := fh.Close(); err1 != nil || err2 != nil || err != nil {
			t.Fatal(err1, err2, err)
		}
		seenHalf := false
		deadline := time.Now().Add(notifyBound)
		for {
			p := s.Config().Policies["api"]
			if p == nil || p.Limit.Rate == int64(h) {
				seenHalf = true
			}
			if p != nil && p.Limit.Rate == int64(10*h) && metric(t, s, "ratewarden_config_reloads_total", `result="success"`) > succ {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the full file (rate %d) was not loaded within %v (config %+v)", round, 10*h, notifyBound, p)
			}
			time.Sleep(time.Millisecond)
		}
		// A reload of the half-written file would have come before the
		// whole file's; give the counter of the last one a moment.
		time.Sleep(50 * time.Millisecond)
		reloads := metric(t, s, "ratewarden_config_reloads_total", `result="success"`) - succ
		failed := metric(t, s, "ratewarden_config_reloads_total", `result="failure"`) - fail
		if window >= halfWrittenWindow {
			late = append(late, fmt.Sprintf("%v+%v", pause, (window-pause).Round(time.Millisecond)))
			t.Logf("round %d: writes %v apart, done %v after the truncation (a busy machine): not counted", round, pause, window.Round(time.Millisecond))
			continue
		}
		counted[pause]++
		if seenHalf || reloads != 1 || failed != 0 {
			t.Errorf("round %d: truncated, rate %d, rate %d within %v: %v successful and %v failed reloads, half-written config seen %v; want the whole file's reload only",
				round, h, 10*h, window.Round(time.Microsecond), reloads, failed, seenHalf)
		}
	}
	t.Logf("rounds counted: %d with writes 1 ms apart, %d 20 ms apart; not counted (pause+lateness): %v", counted[time.Millisecond], counted[20*time.Millisecond], late)
}
