package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store"
)

// The inputs Idle can send (Config.IdleInput).
const (
	// IdleHold alternates Hold and Resume of the session's user queue: each
	// is one step that commits one event and calls no model.
	IdleHold = "hold"
	// IdleStatus reads SessionStatus: a read on the session's actor,
	// nothing committed.
	IdleStatus = "status"
)

// idleParallel is how many sessions Idle drives at once.
const idleParallel = 64

// Mem is a reading of the process's memory.
type Mem struct {
	// HeapInuse is the Go heap in use (runtime.MemStats.HeapInuse), bytes.
	HeapInuse uint64
	// RSS is the process's resident set (VmRSS of /proc/self/status),
	// bytes; 0 where that cannot be read.
	RSS uint64
	// Goroutines is runtime.NumGoroutine.
	Goroutines int
}

// ReadMem reads the process's memory; with gc, after a collection that
// also returns freed memory to the system (debug.FreeOSMemory).
func ReadMem(gc bool) Mem {
	if gc {
		debug.FreeOSMemory()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Mem{HeapInuse: ms.HeapInuse, RSS: rss(), Goroutines: runtime.NumGoroutine()}
}

// rss reads VmRSS from /proc/self/status.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// IdleResult is what Idle measured.
type IdleResult struct {
	// Sessions and Inputs are what ran: Inputs inputs of kind Input to each
	// of Sessions sessions.
	Sessions, Inputs int
	Input            string
	// Create is how long creating the sessions took, until each was
	// quiescent; InputsTook how long the inputs took.
	Create, InputsTook time.Duration
	// OpenAfterCrash is how long vigil.Open took on the same store after
	// the first runtime crashed (its store refused every write from then
	// on, so its stop wrote nothing: no snapshot, no lease given up),
	// taking every session over; Open how long it took after a clean stop
	// of that second runtime. Both are checked: each session committed
	// its recovery step.
	OpenAfterCrash, Open time.Duration
	// Memory readings: before any session (after GC), after creating them
	// (as is, then after GC), after the inputs (as is, then after GC), and
	// after the clean reopen (after GC; the earlier runtimes are closed).
	Baseline, Created, CreatedGC, AfterInputs, AfterInputsGC, Reopened Mem
}

// HeapPerSession is the Go heap each idle session holds after GC, in
// bytes: after creation, and after the inputs.
func (r IdleResult) HeapPerSession() (created, afterInputs float64) {
	n := float64(max(r.Sessions, 1))
	return (float64(r.CreatedGC.HeapInuse) - float64(r.Baseline.HeapInuse)) / n,
		(float64(r.AfterInputsGC.HeapInuse) - float64(r.Baseline.HeapInuse)) / n
}

// Idle creates sessions idle sessions on one runtime (each created with a
// prompt whose round ends at once: one model call answered "ok"), reads
// the process's memory, sends every session inputs inputs of kind
// cfg.IdleInput (none calls a model; idleParallel sessions are driven at
// once, each session's inputs one after the other), reads it again. Then
// the runtime crashes, and Idle times vigil.Open of a new one on the same
// store until it has taken every session over; then that one stops
// cleanly, and Idle times the Open of a third.
//
// The Go heap includes whatever the store keeps in it (everything, for the
// memory store).
func Idle(ctx context.Context, cfg Config, sessions, inputs int) (IdleResult, error) {
	kind := cfg.IdleInput
	if kind == "" {
		kind = IdleHold
	}
	if kind != IdleHold && kind != IdleStatus {
		return IdleResult{}, fmt.Errorf("idle: input %q: want %s or %s", kind, IdleHold, IdleStatus)
	}
	res := IdleResult{Sessions: sessions, Inputs: inputs, Input: kind}
	m := &fastModel{answer: func(*provider.Request) chat.Response {
		return chat.Response{Content: []chat.Block{chat.Text("ok")}, StopReason: chat.StopEndTurn}
	}}
	crash := &crashable{Store: cfg.Store}
	first := cfg
	first.Store = crash
	rt, err := open(ctx, first, m)
	if err != nil {
		return res, fmt.Errorf("idle: open: %w", err)
	}
	defer func() { rt.Close() }()
	res.Baseline = ReadMem(true)

	start := time.Now()
	ids := make([]vigil.SessionID, sessions)
	if err := parallel(ctx, sessions, idleParallel, func(i int) error {
		sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "hi", Permissions: vigil.Permissions{Mode: vigil.PermBypass}})
		if err != nil {
			return fmt.Errorf("create session %d: %w", i, err)
		}
		ids[i] = sess.ID
		return rt.WaitQuiescent(ctx, sess.ID)
	}); err != nil {
		return res, fmt.Errorf("idle: %w", err)
	}
	res.Create = time.Since(start)
	res.Created = ReadMem(false)
	res.CreatedGC = ReadMem(true)

	input := func(id vigil.SessionID, i int) error {
		switch {
		case kind == IdleStatus:
			_, err := rt.SessionStatus(ctx, id)
			return err
		case i%2 == 0:
			return rt.Hold(ctx, id, &vigil.HoldParams{By: "bench", Reason: "idle"})
		}
		return rt.Resume(ctx, id, "bench")
	}
	start = time.Now()
	// Worker w drives sessions w, w+width, …: every session gets its
	// i-th input before any gets its i+1-th.
	width := min(idleParallel, max(sessions, 1))
	if err := parallel(ctx, width, width, func(w int) error {
		for i := range inputs {
			for j := w; j < sessions; j += width {
				if err := input(ids[j], i); err != nil {
					return fmt.Errorf("session %s: input %d: %w", ids[j], i, err)
				}
			}
		}
		return nil
	}); err != nil {
		return res, fmt.Errorf("idle: %w", err)
	}
	res.InputsTook = time.Since(start)
	res.AfterInputs = ReadMem(false)
	res.AfterInputsGC = ReadMem(true)

	// A crash, then a clean stop: each time the new runtime must take
	// every session over in Open.
	crash.crash()
	if res.OpenAfterCrash, err = reopen(ctx, cfg, m, &rt, ids); err != nil {
		return res, fmt.Errorf("idle: after a crash: %w", err)
	}
	if res.Open, err = reopen(ctx, cfg, m, &rt, ids); err != nil {
		return res, fmt.Errorf("idle: after a clean stop: %w", err)
	}
	res.Reopened = ReadMem(true)
	return res, nil
}

// reopen closes *rt, opens a new runtime on cfg's store in its place and
// returns how long Open took, checking that it took every session of ids
// over (each committed its recovery step).
func reopen(ctx context.Context, cfg Config, m provider.Provider, rt **vigil.Runtime, ids []vigil.SessionID) (time.Duration, error) {
	seqs := make([]int64, len(ids))
	(*rt).Close()
	var err error
	for i, id := range ids {
		if seqs[i], err = cfg.Store.LastSeq(ctx, string(id)); err != nil {
			return 0, fmt.Errorf("last seq of %s: %w", id, err)
		}
	}
	start := time.Now()
	next, err := open(ctx, cfg, m)
	if err != nil {
		return 0, fmt.Errorf("reopen: %w", err)
	}
	took := time.Since(start)
	*rt = next
	var missed []error
	for i, id := range ids {
		seq, err := cfg.Store.LastSeq(ctx, string(id))
		if err != nil {
			return took, fmt.Errorf("last seq of %s: %w", id, err)
		}
		if seq <= seqs[i] {
			missed = append(missed, fmt.Errorf("session %s", id))
		}
	}
	if len(missed) > 0 {
		return took, fmt.Errorf("%d of %d sessions not taken over by Open (no recovery step committed): %w", len(missed), len(ids), errors.Join(missed[:min(len(missed), 5)]...))
	}
	return took, nil
}

// crashable is a store whose writes all fail once crash was called, as
// after a kill -9 of the process that wrote through it: its runtime's
// stop then writes nothing (no snapshot, no summary rows, no lease given
// up), and what it had committed stays as it was.
type crashable struct {
	store.Store
	down atomic.Bool
}

func (s *crashable) crash() { s.down.Store(true) }

// refuse is the error of a write after the crash.
func (s *crashable) refuse(what string) error {
	if s.down.Load() {
		return fmt.Errorf("%s after the crash: %w", what, store.ErrUnavailable)
	}
	return nil
}

func (s *crashable) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (*store.Lease, error) {
	if err := s.refuse("lease"); err != nil {
		return nil, err
	}
	return s.Store.LeaseAcquire(ctx, p)
}

func (s *crashable) LeaseAcquireMany(ctx context.Context, p *store.LeaseAcquireManyParams) (*store.LeaseAcquireManyResult, error) {
	if err := s.refuse("leases"); err != nil {
		return nil, err
	}
	return s.Store.LeaseAcquireMany(ctx, p)
}

func (s *crashable) LeaseRenew(ctx context.Context, p *store.LeaseRenewParams) (*store.LeaseRenewResult, error) {
	if err := s.refuse("renew"); err != nil {
		return nil, err
	}
	return s.Store.LeaseRenew(ctx, p)
}

func (s *crashable) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	if err := s.refuse("release"); err != nil {
		return err
	}
	return s.Store.LeaseRelease(ctx, p)
}

func (s *crashable) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	if err := s.refuse("append"); err != nil {
		return nil, err
	}
	return s.Store.EventAppend(ctx, p)
}

func (s *crashable) SnapshotSave(ctx context.Context, p *store.SnapshotSaveParams) error {
	if err := s.refuse("snapshot"); err != nil {
		return err
	}
	return s.Store.SnapshotSave(ctx, p)
}

func (s *crashable) NodeBeat(ctx context.Context, n *store.Node) error {
	if err := s.refuse("beat"); err != nil {
		return err
	}
	return s.Store.NodeBeat(ctx, n)
}

func (s *crashable) NodeLeave(ctx context.Context, id string) error {
	if err := s.refuse("leave"); err != nil {
		return err
	}
	return s.Store.NodeLeave(ctx, id)
}

func (s *crashable) OutputSave(ctx context.Context, p *store.OutputSaveParams) error {
	if err := s.refuse("output"); err != nil {
		return err
	}
	return s.Store.OutputSave(ctx, p)
}
