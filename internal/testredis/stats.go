package testredis

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/redisproc"
)

// WaitReplicated waits until s's first replica has acknowledged
// everything s wrote: the offset in INFO replication's slave0 line reaches
// master_repl_offset. (WAIT would not do: Do opens a connection per command,
// and WAIT only covers writes made on its own connection.)
func (s *Server) WaitReplicated(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var info string
	for time.Now().Before(deadline) {
		var err error
		if info, err = s.Do("INFO", "replication"); err != nil {
			return err
		}
		var master, replica string
		for line := range strings.SplitSeq(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master = v
			}
			if v, ok := strings.CutPrefix(line, "slave0:"); ok {
				for kv := range strings.SplitSeq(v, ",") {
					if o, ok := strings.CutPrefix(kv, "offset="); ok {
						replica = o
					}
				}
			}
		}
		if master != "" && master != "0" && master == replica {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("testredis: the write did not reach %s's replica within %v:\n%s", s.Addr, timeout, info)
}

// CommandCalls returns how many times the server has run each command
// since it started (or since CONFIG RESETSTAT), from INFO commandstats,
// keyed by lower-case command name ("evalsha", "get", ...). Commands run
// inside scripts count too. So do the calls of every Do connection,
// CommandCalls' own included: each opens with HELLO, and rueidis sends a
// PING as it closes it; a test that diffs two looks leaves out hello, info
// and ping.
func (s *Server) CommandCalls() (map[string]int64, error) {
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("testredis: commandstats %q: %w", line, err)
				}
				m[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return m, nil
}

// ScriptCalls returns how many script calls the server has run: EVALSHA,
// EVAL and FCALL (redisstore runs its scripts as functions by default).
func (s *Server) ScriptCalls() (int64, error) {
	m, err := s.CommandCalls()
	return m["evalsha"] + m["eval"] + m["fcall"], err
}

// Time returns the server's clock (TIME) in microseconds since the epoch:
// the clock every script decides on.
func (s *Server) Time() (int64, error) {
	r, err := s.Do("TIME")
	if err != nil {
		return 0, err
	}
	secs, usecs, ok := strings.Cut(r, "\n")
	sec, err1 := strconv.ParseInt(secs, 10, 64)
	usec, err2 := strconv.ParseInt(usecs, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("testredis: TIME: unexpected reply %q", r)
	}
	return sec*1_000_000 + usec, nil
}

// InfoInt returns the integer field of the server's INFO section
// ("memory", "number_of_libraries").
func (s *Server) InfoInt(section, field string) (int64, error) {
	info, err := s.Do("INFO", section)
	if err != nil {
		return 0, err
	}
	n, err := redisproc.ParseInfoInt(info, field)
	if err != nil {
		return 0, fmt.Errorf("testredis: INFO %s of %s: %w", section, s.Addr, err)
	}
	return n, nil
}

// CPU returns the CPU time, user and system, the server has used (INFO
// cpu).
func (s *Server) CPU() (time.Duration, error) {
	info, err := s.Do("INFO", "cpu")
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("testredis: INFO cpu: %q: %w", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}
