//go:build !linux

package bench

import "os/exec"

// dieWithParent is Linux-only (Pdeathsig); elsewhere Stop must run.
func dieWithParent(*exec.Cmd) {}
