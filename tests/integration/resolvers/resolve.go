// Go's pure resolver for tests/integration/resolvers.rs (run with
// GODEBUG=netdns=go): one lookup, as a Go program in a pod makes it,
// timed.
//
//	resolve addrs|addrs4 NAME   LookupHost / LookupIP("ip4")
//	resolve ptr IP              LookupAddr
//	resolve srv NAME            LookupSRV("", "", NAME)
//
// Prints one line: "ok MS ITEM..." (items sorted and unique: addresses,
// names without the trailing dot, PORT:TARGET), or "fail MS WHY".
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: resolve addrs|addrs4|ptr|srv NAME")
		os.Exit(64)
	}
	op, name := os.Args[1], os.Args[2]
	r := &net.Resolver{PreferGo: true}
	ctx := context.Background()
	start := time.Now()
	var items []string
	var err error
	switch op {
	case "addrs":
		items, err = r.LookupHost(ctx, name)
	case "addrs4":
		var ips []net.IP
		ips, err = r.LookupIP(ctx, "ip4", name)
		for _, ip := range ips {
			items = append(items, ip.String())
		}
	case "ptr":
		items, err = r.LookupAddr(ctx, name)
	case "srv":
		var srvs []*net.SRV
		_, srvs, err = r.LookupSRV(ctx, "", "", name)
		for _, s := range srvs {
			items = append(items, fmt.Sprintf("%d:%s", s.Port, s.Target))
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown op", op)
		os.Exit(64)
	}
	ms := time.Since(start).Milliseconds()
	if err != nil || len(items) == 0 {
		why := "no records"
		if err != nil {
			why = err.Error()
		}
		fmt.Printf("fail %d %s\n", ms, why)
		return
	}
	seen := map[string]bool{}
	var out []string
	for _, i := range items {
		i = strings.TrimSuffix(i, ".")
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	sort.Strings(out)
	fmt.Printf("ok %d %s\n", ms, strings.Join(out, " "))
}
