package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store"
)

// ClusterConfig is the setup of a workload on several nodes (runtimes) in
// this process that share one database, each with a store of its own (its
// own connections), as separate vigil serve processes would.
type ClusterConfig struct {
	// Stores are the nodes' stores, one per node, all on one database;
	// the caller closes them.
	Stores []store.Store
	// DataDir holds the nodes' data directories.
	DataDir string
	// N and Workers are as in Config.
	N, Workers int
}

// cluster is a running set of nodes.
type cluster struct {
	rts     []*vigil.Runtime
	servers []*http.Server
}

// close stops the nodes and their peer servers.
func (c *cluster) close() {
	for _, rt := range c.rts {
		rt.Close()
	}
	for _, s := range c.servers {
		s.Close()
	}
}

// openCluster opens one runtime per store, each a member of the cluster
// (vigil.ClusterOptions) serving the calls the others forward to it on a
// loopback port, every one answered by m.
func openCluster(ctx context.Context, cfg ClusterConfig, m provider.Provider) (*cluster, error) {
	c := &cluster{}
	const token = "bench"
	for i, st := range cfg.Stores {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.close()
			return nil, fmt.Errorf("node %d: listen: %w", i+1, err)
		}
		rt, err := vigil.Open(ctx, vigil.Options{
			Store: st, Providers: map[string]provider.Provider{"bench": m}, DefaultProvider: "bench",
			DataDir: filepath.Join(cfg.DataDir, fmt.Sprintf("node%d", i+1)), Node: fmt.Sprintf("bench-node%d", i+1),
			Cluster: &vigil.ClusterOptions{Advertise: "http://" + ln.Addr().String(), Token: token},
		})
		if err != nil {
			ln.Close()
			c.close()
			return nil, fmt.Errorf("node %d: open: %w", i+1, err)
		}
		mux := http.NewServeMux()
		mux.Handle("POST "+vigil.PeerPath, rt.PeerHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		c.rts = append(c.rts, rt)
		c.servers = append(c.servers, srv)
	}
	return c, nil
}

// LoadCluster is Load on len(cfg.Stores) nodes of one database: the
// sessions are created on the nodes in turn (a node may place a session on
// a less loaded one), and every node's model answers as Load's does.
func LoadCluster(ctx context.Context, cfg ClusterConfig, sessions int) (LoadResult, error) {
	if sessions <= 0 || len(cfg.Stores) == 0 {
		return LoadResult{}, fmt.Errorf("load cluster: %d sessions on %d nodes", sessions, len(cfg.Stores))
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = LoadWorkers
	}
	m := newLoadModel(workers, LoadShare(cfg.N, sessions, workers))
	c, err := openCluster(ctx, cfg, &fastModel{answer: m.answer})
	if err != nil {
		return LoadResult{}, fmt.Errorf("load cluster: %w", err)
	}
	defer c.close()
	return loadOn(ctx, c.rts, cfg.Stores, m, sessions)
}

// IdleClusterResult is what IdleCluster measured.
type IdleClusterResult struct {
	// Nodes and Sessions are what ran: Sessions idle sessions over Nodes
	// nodes; PerNode is how many each node ran at the window's start.
	Nodes, Sessions int
	PerNode         []int
	// Window is how long the transactions were counted, Commits how many
	// the database committed meanwhile (pg_stat_database.xact_commit),
	// Rollbacks how many it rolled back.
	Window             time.Duration
	Commits, Rollbacks int64
}

// PerSecond is the committed transactions per second.
func (r IdleClusterResult) PerSecond() float64 { return float64(r.Commits) / r.Window.Seconds() }

// IdleCluster creates sessions idle sessions on the nodes of cfg (each
// with a prompt answered at once), lets the nodes settle for settle, then
// counts the transactions the database commits during window while
// nothing happens but the nodes' own upkeep (heartbeats, lease renewals,
// watching for events). dsn is the database's, read for its
// pg_stat_database counters.
func IdleCluster(ctx context.Context, cfg ClusterConfig, dsn string, sessions int, settle, window time.Duration) (IdleClusterResult, error) {
	res := IdleClusterResult{Nodes: len(cfg.Stores), Sessions: sessions, Window: window}
	m := &fastModel{answer: func(*provider.Request) chat.Response {
		return chat.Response{Content: []chat.Block{chat.Text("ok")}, StopReason: chat.StopEndTurn}
	}}
	c, err := openCluster(ctx, cfg, m)
	if err != nil {
		return res, fmt.Errorf("idle cluster: %w", err)
	}
	defer c.close()
	if err := parallel(ctx, sessions, idleParallel, func(i int) error {
		rt := c.rts[i%len(c.rts)]
		sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "hi", Permissions: vigil.Permissions{Mode: vigil.PermBypass}})
		if err != nil {
			return fmt.Errorf("create session %d: %w", i, err)
		}
		return rt.WaitQuiescent(ctx, sess.ID)
	}); err != nil {
		return res, fmt.Errorf("idle cluster: %w", err)
	}
	if err := sleep(ctx, settle); err != nil {
		return res, err
	}
	nodes, err := c.rts[0].Nodes(ctx)
	if err != nil {
		return res, fmt.Errorf("idle cluster: nodes: %w", err)
	}
	for _, n := range nodes {
		res.PerNode = append(res.PerNode, n.Sessions)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, fmt.Errorf("idle cluster: connect: %w", err)
	}
	defer conn.Close(context.Background())
	commits0, rollbacks0, err := xacts(ctx, conn)
	if err != nil {
		return res, err
	}
	if err := sleep(ctx, window); err != nil {
		return res, err
	}
	commits1, rollbacks1, err := xacts(ctx, conn)
	if err != nil {
		return res, err
	}
	// The first reading is a transaction of this connection's own, not
	// the nodes'.
	res.Commits, res.Rollbacks = commits1-commits0-1, rollbacks1-rollbacks0
	return res, nil
}

// xacts reads the database's committed and rolled back transactions. The
// server flushes a backend's counts about once a second, so a reading
// lags by up to that much at either end of a window.
func xacts(ctx context.Context, conn *pgx.Conn) (commits, rollbacks int64, err error) {
	// A statement outside a transaction block is a transaction of its
	// own: the server's statistics snapshot is fresh at each.
	err = conn.QueryRow(ctx, "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&commits, &rollbacks)
	if err != nil {
		return 0, 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return commits, rollbacks, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errors.Join(ctx.Err(), context.Cause(ctx))
	}
}
