package memstore_test

import (
	"fmt"
	"testing"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memstore.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestFailWrites checks the memstore's injected failure with the suite's
// fault check: a failing write keeps nothing, healing loses nothing.
func TestFailWrites(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	storetest.RunFault(t, s, storetest.Fault{
		Break: func(*testing.T) { s.FailWrites(fmt.Errorf("simulated disk: %w", store.ErrFull)) },
		Heal:  func(*testing.T) { s.FailWrites(nil) },
		Want:  store.ErrFull,
	})
}
