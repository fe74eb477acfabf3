//go:build !linux

package demo

import "os/exec"

// setDeathSignal does nothing where there is no parent-death signal: the
// demo still kills its redis-server on every way out it controls
// (return, Ctrl-C, SIGTERM).
func setDeathSignal(*exec.Cmd) {}
