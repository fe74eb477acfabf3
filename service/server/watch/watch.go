// Package watch reloads a configuration when its files change: filesystem
// notifications on the directories that hold them (and where their
// symlinks lead), polling as the fallback, and a change loaded only once
// it has settled, so a half-written file is never taken. What to watch,
// how to tell what is loaded and how to reload come from the caller (the
// server); of the project it imports service/config (the files'
// fingerprint) only.
package watch

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ratewarden/ratewarden/service/config"
)

// Files watches the files of a configuration: Run reloads it when they
// change.
type Files struct {
	// Paths are the config files and directories (config.Fingerprint's).
	Paths []string
	// Every is how often the files are polled, the fallback for
	// filesystems without notifications; above 0.
	Every time.Duration
	Log   *slog.Logger
	// Loaded returns the fingerprint of the configuration in force.
	Loaded func() string
	// Reload loads the files again, logging its own errors; Loaded says
	// what it loaded.
	Reload func()
}

// The watcher's timing. A filesystem event starts a check once the files
// have been quiet for notifyQuiet; a changed fingerprint is read again
// settleDelay later, with no event in between, and loaded when it is the
// same: about 50 ms from a settled change to the new configuration.
const (
	notifyQuiet = 15 * time.Millisecond
	settleDelay = 35 * time.Millisecond
)

// Run reloads the configuration when its files change, until stop is
// closed. It learns of a change from filesystem notifications (fsnotify,
// on the directories that hold the config paths and their symlink
// targets, so an in-place write, a rename over a file and a Kubernetes
// ConfigMap's symlink swap are all seen) and, as the fallback for
// filesystems without notifications, by polling every f.Every. Either way
// a changed fingerprint is loaded only once it has been read twice in a
// row, settleDelay apart and with no event between: a file caught
// half-written (truncated, then filled, as `cat > f` or a non-atomic save
// does) is not loaded until it stops changing.
func (f *Files) Run(stop <-chan struct{}) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		f.Log.Warn("config watch: no filesystem notifications; polling only", "interval", f.Every, "err", err)
		w = nil
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		f.addWatches(w)
		events, errs = w.Events, w.Errors
	}
	tick := time.NewTicker(f.Every)
	defer tick.Stop()
	// A first check at once: an edit made between the load and the
	// watches above sent no notification.
	check := time.NewTimer(0)
	c := checker{f: f}
	for {
		var pending bool
		select {
		case <-stop:
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
			f.Log.Warn("config watch: filesystem notification error; polling continues", "err", err)
			continue
		}
		if w != nil {
			f.addWatches(w) // a directory replaced since is watched again
		}
		if pending {
			check.Reset(settleDelay)
		}
	}
}

// addWatches watches the directories of the config paths: each path's
// parent, a directory path itself, and the same for where a symlink
// leads. Errors are ignored: polling covers what cannot be watched.
func (f *Files) addWatches(w *fsnotify.Watcher) {
	for _, p := range f.Paths {
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
	f       *Files
	st      settle
	lastErr string
}

// check reads the config files' fingerprint, reloads when a change has
// settled, and reports whether a change is waiting to settle.
func (c *checker) check() bool {
	f := c.f
	fp, err := config.Fingerprint(f.Paths...)
	if err != nil {
		if err.Error() != c.lastErr { // say it once, not every check
			f.Log.Warn("config watch: cannot read the config files; keeping the configuration in force", "err", err)
			c.lastErr = err.Error()
		}
		return false
	}
	c.lastErr = ""
	if c.st.stable(fp, fp != f.Loaded()) {
		f.Reload()
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
