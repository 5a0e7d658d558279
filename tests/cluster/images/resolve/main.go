// Command resolve looks names up the way a training image does: through
// the pod's /etc/resolv.conf, with Go's own resolver (-resolver go, what a
// Go binary built without cgo uses) or with glibc's getaddrinfo and
// getnameinfo (-resolver cgo, what Python, PyTorch and MPI use). It is the
// client image's lookup tool (tests/cluster/images.sh).
//
//	resolve [-resolver go|cgo] lookup NAME|IP...
//	    one line per argument, "NAME ok MS ADDR,ADDR" or "NAME fail MS
//	    ERROR" (an IP is looked up in reverse); exit 1 if any failed.
//	resolve [-resolver go|cgo] loop [-rate 50] [-slow 1s] [-max 10m] [-stop FILE] NAME...
//	    looks the names up in turn, RATE a second, until FILE exists or MAX
//	    has passed. Each lookup runs on its own (at most 256 at once), so a
//	    slow one does not hold the rate back. Prints a JSON line for each
//	    failed or slow lookup (the first 500), a progress line every 5 s and
//	    a summary line at the end.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("resolver", "go", "go (Go's resolver) or cgo (glibc)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: resolve [-resolver go|cgo] lookup NAME... | loop [flags] NAME...")
	}
	flag.Parse()
	if *mode != "go" && *mode != "cgo" {
		fatal("-resolver must be go or cgo, got %q", *mode)
	}
	// Go chooses between its resolver and the C library's when it starts;
	// GODEBUG=netdns=cgo makes it use glibc's for every lookup.
	if *mode == "cgo" && !strings.Contains(os.Getenv("GODEBUG"), "netdns=cgo") {
		self, err := os.Executable()
		if err != nil {
			fatal("cannot find own executable: %v", err)
		}
		env := append(os.Environ(), "GODEBUG=netdns=cgo")
		fatal("re-exec with GODEBUG=netdns=cgo: %v", syscall.Exec(self, os.Args, env))
	}
	r := &net.Resolver{PreferGo: *mode == "go"}
	args := flag.Args()
	if len(args) < 2 {
		flag.Usage()
		os.Exit(64)
	}
	switch args[0] {
	case "lookup":
		os.Exit(lookupAll(r, args[1:]))
	case "loop":
		loop(r, args[1:])
	default:
		flag.Usage()
		os.Exit(64)
	}
}

func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "resolve: "+format+"\n", a...)
	os.Exit(64)
}

// lookup resolves one name (or, for an IP, its reverse name).
func lookup(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	if net.ParseIP(name) != nil {
		return r.LookupAddr(ctx, name)
	}
	addrs, err := r.LookupHost(ctx, name)
	sort.Strings(addrs)
	return addrs, err
}

func lookupAll(r *net.Resolver, names []string) int {
	code := 0
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		addrs, err := lookup(ctx, r, n)
		ms := time.Since(start).Milliseconds()
		cancel()
		if err != nil {
			fmt.Printf("%s fail %d %v\n", n, ms, err)
			code = 1
			continue
		}
		fmt.Printf("%s ok %d %s\n", n, ms, strings.Join(addrs, ","))
	}
	return code
}

type event struct {
	Kind  string  `json:"event"`
	At    float64 `json:"at"` // seconds since the loop began
	Unix  float64 `json:"unix"`
	Name  string  `json:"name"`
	Ms    float64 `json:"ms"`
	Error string  `json:"error,omitempty"`
}

type summary struct {
	Kind    string  `json:"event"`
	Total   int     `json:"total"`
	Failed  int     `json:"failed"`
	Slow    int     `json:"slow"`
	MaxMs   float64 `json:"max_ms"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	Seconds float64 `json:"seconds"`
	// The span from the first failed or slow lookup's start to the last
	// one's end: how long lookups were not answered in time.
	GapMs float64 `json:"gap_ms"`
}

func loop(r *net.Resolver, args []string) {
	fs := flag.NewFlagSet("loop", flag.ExitOnError)
	rate := fs.Int("rate", 50, "lookups a second")
	slow := fs.Duration("slow", time.Second, "a lookup slower than this is counted as slow")
	max := fs.Duration("max", 10*time.Minute, "stop after this long at the latest")
	stop := fs.String("stop", "", "stop once this file exists")
	fs.Parse(args)
	names := fs.Args()
	if len(names) == 0 || *rate < 1 || *rate > 1000 {
		fatal("loop needs names and a rate from 1 to 1000")
	}
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	var durs []float64
	var sum summary
	sum.Kind = "summary"
	gapFrom, gapTo := -1.0, -1.0
	printed := 0
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	begin := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	lastProgress := begin
	for i := 0; ; i++ {
		now := <-tick.C
		if now.Sub(begin) > *max {
			break
		}
		if *stop != "" && i%*rate == 0 {
			if _, err := os.Stat(*stop); err == nil {
				break
			}
		}
		if now.Sub(lastProgress) >= 5*time.Second {
			lastProgress = now
			mu.Lock()
			fmt.Printf("{\"event\":\"progress\",\"at\":%.1f,\"total\":%d,\"failed\":%d,\"slow\":%d}\n",
				now.Sub(begin).Seconds(), sum.Total, sum.Failed, sum.Slow)
			mu.Unlock()
		}
		name := names[i%len(names)]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := lookup(ctx, r, name)
			d := time.Since(start)
			ms := float64(d.Microseconds()) / 1000
			mu.Lock()
			defer mu.Unlock()
			sum.Total++
			durs = append(durs, ms)
			if ms > sum.MaxMs {
				sum.MaxMs = ms
			}
			kind := ""
			if err != nil {
				sum.Failed++
				kind = "failed"
			} else if d > *slow {
				sum.Slow++
				kind = "slow"
			}
			if kind == "" {
				return
			}
			at := start.Sub(begin).Seconds()
			if gapFrom < 0 || at < gapFrom {
				gapFrom = at
			}
			if end := at + d.Seconds(); end > gapTo {
				gapTo = end
			}
			if printed < 500 {
				printed++
				e := event{Kind: kind, At: at, Unix: float64(start.UnixMilli()) / 1000, Name: name, Ms: ms}
				if err != nil {
					e.Error = err.Error()
				}
				out.Encode(e)
			}
		}()
	}
	wg.Wait()
	sort.Float64s(durs)
	pct := func(p float64) float64 {
		if len(durs) == 0 {
			return 0
		}
		return durs[int(p*float64(len(durs)-1))]
	}
	sum.P50Ms, sum.P99Ms = pct(0.50), pct(0.99)
	sum.Seconds = time.Since(begin).Seconds()
	if gapFrom >= 0 {
		sum.GapMs = (gapTo - gapFrom) * 1000
	}
	out.Encode(sum)
}
