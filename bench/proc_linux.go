package bench

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process when this one dies,
// so a bench run that is killed (or crashes) leaves no redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
