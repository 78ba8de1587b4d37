//go:build !vigil_mattn

package sqlite

import (
	"database/sql/driver"
	"errors"

	msqlite "modernc.org/sqlite"
)

// driverName names the SQLite driver of this build: modernc.org/sqlite, a
// pure-Go translation of SQLite. Build with -tags vigil_mattn for the cgo
// driver github.com/mattn/go-sqlite3 instead.
const driverName = "modernc"

// newDriver returns a driver of its own (not the one registered with
// database/sql), so nothing registered elsewhere reaches our connections.
func newDriver() driver.Driver { return &msqlite.Driver{} }

// errorCode returns the extended SQLite result code err carries.
func errorCode(err error) (int, bool) {
	var e *msqlite.Error
	if errors.As(err, &e) {
		return e.Code(), true
	}
	return 0, false
}
