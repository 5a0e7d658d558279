// Command podns-oracle is the chaos schedule's record of the truth: its own
// client-go watch of Pods, Services and Jobs in one namespace (no code
// shared with podns), written as JSON lines with the time each change
// reached it.
//
//	podns-oracle --kubeconfig FILE --namespace NS [--zone cluster.local] [--out FILE]
//
// Lines (every one has "t", Unix seconds, and "ev"):
//
//	{"ev":"name","name":N,"addrs":[…]}   the addresses N should answer from now on
//	                                      ([] = none: N should not exist)
//	{"ev":"synced"}                       the first lists are in
//	{"ev":"pod"|"job"|"service",…}        each object event, for the record
//
// The names are the ones the oracle keeps the rule of (docs/records.md):
//
//   - kind "host": <hostname>.<subdomain>.<ns>.svc.<zone> → the IPs of every
//     published pod with that spec.hostname and spec.subdomain (published:
//     an IP, not Succeeded or Failed, no deletionTimestamp). podns answers
//     one of them when two pods share a hostname (a restart overlap), so an
//     answer is right when it is a non-empty part of this set;
//   - kind "set": <svc>.<ns>.svc.<zone> of a headless Service with a
//     selector and publishNotReadyAddresses → every published pod it selects.
//
// Nothing else podns serves (ClusterIPs, SRV, PTR, the rank view, selectorless
// Services) is kept here. It runs until SIGTERM or --duration.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type podInfo struct {
	host, sub string
	addrs     []string
	published bool
	labels    map[string]string
}

type svcInfo struct {
	selector labels.Selector
	headless bool
}

type oracle struct {
	mu    sync.Mutex
	out   *json.Encoder
	ns    string
	zone  string
	pods  map[string]podInfo // by pod name
	svcs  map[string]svcInfo // by Service name
	names map[string]string  // name → last addresses written ("a,b")
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (o *oracle) write(m map[string]any) {
	m["t"] = now()
	if err := o.out.Encode(m); err != nil {
		fmt.Fprintf(os.Stderr, "podns-oracle: write: %v\n", err)
		os.Exit(1)
	}
}

func published(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func info(p *corev1.Pod) podInfo {
	var addrs []string
	for _, ip := range p.Status.PodIPs {
		addrs = append(addrs, ip.IP)
	}
	if len(addrs) == 0 && p.Status.PodIP != "" {
		addrs = []string{p.Status.PodIP}
	}
	return podInfo{host: p.Spec.Hostname, sub: p.Spec.Subdomain, addrs: addrs, published: published(p), labels: p.Labels}
}

func (o *oracle) hostName(host, sub string) string {
	return fmt.Sprintf("%s.%s.%s.svc.%s", host, sub, o.ns, o.zone)
}

func (o *oracle) setName(svc string) string {
	return fmt.Sprintf("%s.%s.svc.%s", svc, o.ns, o.zone)
}

// truth recomputes one name's addresses and writes them if they changed.
func (o *oracle) truth(name, kind string, addrs []string) {
	sort.Strings(addrs)
	uniq := addrs[:0]
	for i, a := range addrs {
		if i == 0 || a != addrs[i-1] {
			uniq = append(uniq, a)
		}
	}
	key := strings.Join(uniq, ",")
	last, seen := o.names[name]
	if seen && last == key {
		return
	}
	if !seen && len(uniq) == 0 {
		return
	}
	o.names[name] = key
	o.write(map[string]any{"ev": "name", "kind": kind, "name": name, "addrs": append([]string{}, uniq...)})
}

func (o *oracle) hostTruth(host, sub string) {
	if host == "" || sub == "" {
		return
	}
	var addrs []string
	for _, p := range o.pods {
		if p.published && p.host == host && p.sub == sub {
			addrs = append(addrs, p.addrs...)
		}
	}
	o.truth(o.hostName(host, sub), "host", addrs)
}

func (o *oracle) setTruth(svc string) {
	s, ok := o.svcs[svc]
	var addrs []string
	if ok && s.headless {
		for _, p := range o.pods {
			if p.published && s.selector.Matches(labels.Set(p.labels)) {
				addrs = append(addrs, p.addrs...)
			}
		}
	}
	o.truth(o.setName(svc), "set", addrs)
}

// podChanged: every name the pod's old and new state take part in.
func (o *oracle) podChanged(name string, old, cur *podInfo) {
	for _, p := range []*podInfo{old, cur} {
		if p != nil {
			o.hostTruth(p.host, p.sub)
		}
	}
	for svc, s := range o.svcs {
		for _, p := range []*podInfo{old, cur} {
			if p != nil && s.headless && s.selector.Matches(labels.Set(p.labels)) {
				o.setTruth(svc)
				break
			}
		}
	}
}

func (o *oracle) onPod(typ string, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.write(map[string]any{"ev": "pod", "type": typ, "pod": p.Name, "uid": string(p.UID), "rv": p.ResourceVersion,
		"ip": p.Status.PodIP, "phase": string(p.Status.Phase), "deleting": p.DeletionTimestamp != nil,
		"hostname": p.Spec.Hostname, "subdomain": p.Spec.Subdomain})
	var old *podInfo
	if prev, ok := o.pods[p.Name]; ok {
		old = &prev
	}
	if typ == "delete" {
		delete(o.pods, p.Name)
		o.podChanged(p.Name, old, nil)
		return
	}
	cur := info(p)
	o.pods[p.Name] = cur
	o.podChanged(p.Name, old, &cur)
}

func (o *oracle) onService(typ string, obj any) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.write(map[string]any{"ev": "service", "type": typ, "service": s.Name, "rv": s.ResourceVersion})
	if typ == "delete" {
		delete(o.svcs, s.Name)
	} else {
		o.svcs[s.Name] = svcInfo{
			selector: labels.SelectorFromSet(s.Spec.Selector),
			headless: s.Spec.ClusterIP == corev1.ClusterIPNone && len(s.Spec.Selector) > 0 && s.Spec.PublishNotReadyAddresses,
		}
	}
	o.setTruth(s.Name)
}

func (o *oracle) onJob(typ string, obj any) {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.write(map[string]any{"ev": "job", "type": typ, "job": j.Name, "uid": string(j.UID), "rv": j.ResourceVersion,
		"active": j.Status.Active, "deleting": j.DeletionTimestamp != nil})
}

// source is one kind's list and watch, typed by the caller.
type source struct {
	res   string
	list  func(context.Context, metav1.ListOptions) ([]runtime.Object, string, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
	on    func(typ string, obj any)
}

// listed turns a typed List (pods.List, …) into a source's: its items, as
// runtime objects, and the list's resourceVersion.
func listed[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error)) func(context.Context, metav1.ListOptions) ([]runtime.Object, string, error) {
	return func(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, string, error) {
		l, err := list(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, "", err
		}
		m, err := meta.ListAccessor(l)
		if err != nil {
			return nil, "", err
		}
		return items, m.GetResourceVersion(), nil
	}
}

func nameOf(obj runtime.Object) (string, string) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", ""
	}
	return m.GetName(), m.GetResourceVersion()
}

// follow lists, then watches from the list's resourceVersion, resuming from
// the last one it saw whenever a watch ends and listing again (a relist
// applied as a difference, deletions included) only on 410 Gone. Retries
// come every 200 ms, never with client-go's reflector backoff (up to 30 s):
// the truth must not lag the API server by more than the server itself.
func (o *oracle) follow(ctx context.Context, s source, synced chan<- struct{}) {
	known := map[string]runtime.Object{}
	rv := ""
	first := true
	note := func(what string, err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		m := map[string]any{"ev": "watch", "res": s.res, "what": what, "rv": rv}
		if err != nil {
			m["error"] = err.Error()
		}
		o.write(m)
	}
	retry := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
			return true
		}
	}
	for ctx.Err() == nil {
		if rv == "" {
			items, listRV, err := s.list(ctx, metav1.ListOptions{})
			if err != nil {
				note("list-error", err)
				if !retry() {
					return
				}
				continue
			}
			seen := map[string]bool{}
			for _, it := range items {
				n, _ := nameOf(it)
				seen[n] = true
				if _, ok := known[n]; ok {
					s.on("update", it)
				} else {
					s.on("add", it)
				}
				known[n] = it
			}
			for n, it := range known {
				if !seen[n] {
					s.on("delete", it)
					delete(known, n)
				}
			}
			rv = listRV
			note("listed", nil)
			if first {
				first = false
				synced <- struct{}{}
			}
		}
		w, err := s.watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				note("expired", err)
				rv = ""
				continue
			}
			note("watch-error", err)
			if !retry() {
				return
			}
			continue
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				n, r := nameOf(ev.Object)
				known[n] = ev.Object
				rv = r
				if ev.Type == watch.Added {
					s.on("add", ev.Object)
				} else {
					s.on("update", ev.Object)
				}
			case watch.Deleted:
				n, r := nameOf(ev.Object)
				delete(known, n)
				rv = r
				s.on("delete", ev.Object)
			case watch.Bookmark:
				_, rv = nameOf(ev.Object)
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					note("expired", err)
					rv = ""
				} else {
					note("watch-event-error", err)
				}
			}
			if rv == "" {
				break
			}
		}
		w.Stop()
		if ctx.Err() == nil && rv != "" {
			note("rewatch", nil)
			if !retry() {
				return
			}
		}
	}
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	ns := flag.String("namespace", "", "the namespace to watch (required)")
	zone := flag.String("zone", "cluster.local", "the cluster's DNS zone")
	outPath := flag.String("out", "-", "JSON lines to this file (- for stdout)")
	duration := flag.Duration("duration", 0, "stop after this long (0: at SIGTERM)")
	flag.Parse()
	if *ns == "" {
		fmt.Fprintln(os.Stderr, "podns-oracle: --namespace is required")
		os.Exit(64)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podns-oracle: kubeconfig: %v\n", err)
		os.Exit(64)
	}
	cfg.UserAgent = "podns-oracle"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podns-oracle: client: %v\n", err)
		os.Exit(64)
	}
	out := os.Stdout
	if *outPath != "-" {
		if out, err = os.Create(*outPath); err != nil {
			fmt.Fprintf(os.Stderr, "podns-oracle: %v\n", err)
			os.Exit(64)
		}
	}
	o := &oracle{out: json.NewEncoder(out), ns: *ns, zone: *zone,
		pods: map[string]podInfo{}, svcs: map[string]svcInfo{}, names: map[string]string{}}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	ns_ := *ns
	pods := cs.CoreV1().Pods(ns_)
	svcs := cs.CoreV1().Services(ns_)
	jobs := cs.BatchV1().Jobs(ns_)
	sources := []source{
		{res: "pods", on: o.onPod, watch: pods.Watch, list: listed(pods.List)},
		{res: "services", on: o.onService, watch: svcs.Watch, list: listed(svcs.List)},
		{res: "jobs", on: o.onJob, watch: jobs.Watch, list: listed(jobs.List)},
	}
	synced := make(chan struct{}, len(sources))
	var wg sync.WaitGroup
	for _, s := range sources {
		wg.Add(1)
		go func(s source) {
			defer wg.Done()
			o.follow(ctx, s, synced)
		}(s)
	}
	for range sources {
		select {
		case <-synced:
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "podns-oracle: stopped before the first lists")
			os.Exit(1)
		}
	}
	o.mu.Lock()
	o.write(map[string]any{"ev": "synced"})
	o.mu.Unlock()
	<-ctx.Done()
	wg.Wait()
	o.mu.Lock()
	o.write(map[string]any{"ev": "end"})
	o.mu.Unlock()
}
