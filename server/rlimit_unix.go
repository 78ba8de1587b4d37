//go:build unix

package server

import "syscall"

// openFileLimit is the process's soft limit on open files, or 0 when it
// cannot be read.
func openFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
