// Package clock is vigil's one time source: the runtime, the processes it
// runs and their timeouts all read it, so that a test's clock reaches every
// part (a fake, or the real one inside a testing/synctest bubble).
package clock

import "time"

// Clock tells time and runs functions later.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call made by Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did.
	Stop() bool
}

// Real returns the system clock.
func Real() Clock { return real{} }

type real struct{}

func (real) Now() time.Time { return time.Now() }

func (real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
