package vigil

import "time"

// RunObserver is an Observer that also hears how long each run took: from
// its start to its end by the events' times, so a run that began before a
// restart and ended after it counts its whole length.
type RunObserver interface {
	// RunDuration is called when a run ends, with how and after how long.
	RunDuration(session SessionID, status string, d time.Duration)
}
