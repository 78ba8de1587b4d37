//go:build vigil_mattn

package sqlite

import (
	"database/sql/driver"
	"errors"

	"github.com/mattn/go-sqlite3"
)

// driverName names the SQLite driver of this build: github.com/mattn/go-sqlite3,
// SQLite's C amalgamation through cgo, selected by the vigil_mattn build tag.
const driverName = "mattn"

// newDriver returns a driver of its own (not the one registered with
// database/sql).
func newDriver() driver.Driver { return &sqlite3.SQLiteDriver{} }

// errorCode returns the extended SQLite result code err carries.
func errorCode(err error) (int, bool) {
	var e sqlite3.Error
	if errors.As(err, &e) {
		return int(e.ExtendedCode), true
	}
	var pe *sqlite3.Error
	if errors.As(err, &pe) && pe != nil {
		return int(pe.ExtendedCode), true
	}
	return 0, false
}
