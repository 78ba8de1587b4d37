//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// userTimeout returns nil: TCP_USER_TIMEOUT is Linux's; elsewhere the
// keepalives alone drop a dead connection.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }
