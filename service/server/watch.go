package server

import (
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ratewarden/ratewarden/service/config"
)

// The watcher's timing. A filesystem event starts a check once the files
// have been quiet for notifyQuiet; a changed fingerprint is read again
// settleDelay later, with no event in between, and loaded when it is the
// same: about 50 ms from a settled change to the new configuration.
const (
	notifyQuiet = 15 * time.Millisecond
	settleDelay = 35 * time.Millisecond
)

// watch reloads the configuration when its files change. It learns of a
// change from filesystem notifications (fsnotify, on the directories that
// hold the config paths and their symlink targets, so an in-place write, a
// rename over a file and a Kubernetes ConfigMap's symlink swap are all
// seen) and, as the fallback for filesystems without notifications, by
// polling every s.interval. Either way a changed fingerprint is loaded
// only once it has been read twice in a row, settleDelay apart and with no
// event between: a file caught half-written (truncated, then filled, as
// `cat > f` or a non-atomic save does) is not loaded until it stops
// changing.
func (s *Server) watch() {
	defer s.wg.Done()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("config watch: no filesystem notifications; polling only", "interval", s.interval, "err", err)
		w = nil
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		s.addWatches(w)
		events, errs = w.Events, w.Errors
	}
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	// A first check at once: an edit made between the load and the
	// watches above sent no notification.
	check := time.NewTimer(0)
	c := checker{s: s}
	for {
		var pending bool
		select {
		case <-s.stop:
			return
		case <-tick.C:
			pending = c.check()
		case <-check.C:
			pending = c.check()
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			c.st.pending = "" // still changing: start settling over
			check.Reset(notifyQuiet)
			continue
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn("config watch: filesystem notification error; polling continues", "err", err)
			continue
		}
		if w != nil {
			s.addWatches(w) // a directory replaced since is watched again
		}
		if pending {
			check.Reset(settleDelay)
		}
	}
}

// addWatches watches the directories of the config paths: each path's
// parent, a directory path itself, and the same for where a symlink
// leads. Errors are ignored: polling covers what cannot be watched.
func (s *Server) addWatches(w *fsnotify.Watcher) {
	for _, p := range s.paths {
		for _, q := range []string{p, resolved(p)} {
			if q == "" {
				continue
			}
			_ = w.Add(filepath.Dir(q))
			if fi, err := os.Stat(q); err == nil && fi.IsDir() {
				_ = w.Add(q)
			}
		}
	}
}

// resolved is p with its symlinks followed, or "" when that fails or
// changes nothing.
func resolved(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil || r == p {
		return ""
	}
	return r
}

// checker reads the fingerprint for the watcher and reloads settled
// changes.
type checker struct {
	s       *Server
	st      settle
	lastErr string
}

// check reads the config files' fingerprint, reloads when a change has
// settled, and reports whether a change is waiting to settle.
func (c *checker) check() bool {
	s := c.s
	fp, err := config.Fingerprint(s.paths...)
	if err != nil {
		if err.Error() != c.lastErr { // say it once, not every check
			s.log.Warn("config watch: cannot read the config files; keeping the configuration in force", "err", err)
			c.lastErr = err.Error()
		}
		return false
	}
	c.lastErr = ""
	s.reloadMu.Lock()
	changed := fp != s.fingerprint
	s.reloadMu.Unlock()
	if c.st.stable(fp, changed) {
		_ = s.Reload() // logged inside
		return false
	}
	return c.st.pending != ""
}

// settle tells the watcher when a changed fingerprint has settled.
type settle struct{ pending string }

// stable is called on every check with the fingerprint read and whether it
// differs from the loaded one. It reports true when a changed fingerprint
// is the same one the previous check saw: the files stopped changing.
func (st *settle) stable(fp string, changed bool) bool {
	switch {
	case !changed:
		st.pending = ""
		return false
	case fp != st.pending:
		st.pending = fp // changed: reload if it is the same on the next check
		return false
	default:
		st.pending = ""
		return true
	}
}
