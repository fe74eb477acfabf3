package testredis

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process (redis-cli) when this
// one dies, even by SIGKILL, as redisproc does for the servers.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
