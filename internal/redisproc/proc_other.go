//go:build !linux

package redisproc

import "os/exec"

// dieWithParent does nothing where there is no parent-death signal: the
// caller must Kill what it started on every way out it controls.
func dieWithParent(*exec.Cmd) {}
