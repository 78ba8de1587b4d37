package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/vigilrun/vigil/server"
)

// cmdNodes lists the nodes of the server's cluster: each one's address,
// state, sessions and last heartbeat.
func cmdNodes(ctx context.Context, e *env, args []string) error {
	cf, _, err := clientCommand(e, "nodes", "nodes [--json]", 0, args, nil)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	var list server.NodeList
	b, err := c.get(ctx, "/api/nodes", &list)
	if err != nil {
		return err
	}
	if cf.json {
		return printRaw(e, b)
	}
	printNodes(e, list.Nodes)
	return nil
}

// printNodes prints the nodes as a table; the one that answered is
// marked with a *.
func printNodes(e *env, nodes []server.Node) {
	if len(nodes) == 0 {
		fmt.Fprintln(e.stdout, "no nodes")
		return
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tSESSIONS\tBEAT\tSTARTED")
	for _, n := range nodes {
		id := n.ID
		if n.Self {
			id += " *"
		}
		state := "alive"
		switch {
		case !n.Alive:
			state = "dead"
		case n.Draining:
			state = "draining"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", id, orDefault(n.Address, "-"), state, n.Sessions, ago(n.Beat), ago(n.Started))
	}
	_ = tw.Flush()
	fmt.Fprintln(e.stdout, "(* the node that answered)")
}
