package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// open opens the chosen store and returns it with the data directory, the
// node id and a function that closes it.
func (f *storeFlags) open(ctx context.Context, e *env, logger *slog.Logger) (store.Store, string, string, func(), error) {
	dir, err := f.dataDir(e)
	if err != nil {
		return nil, "", "", nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", "", nil, fmt.Errorf("data directory: %w", err)
	}
	st := memstore.New()
	return st, dir, "run", func() { st.Close() }, nil
}
