//! `podns explain`, the writer's side: what the model holds for one name,
//! which objects a name's answer comes from, the record rule that applied,
//! and for a name without records the nearest reason the model can see (a
//! pod without an IP, a terminating pod, the other pod of a shared
//! hostname, ...).
//!
//! It re-derives no rule. A name is read through the one grammar
//! ([`names::QName`]) the table's lookup and the answer rules read it
//! with; whether a name has names below it is asked of the table; the
//! duplicate order ([`Pod::duplicate_step`]) and the PTR choice
//! ([`Writer::ptr_choice`]) say why they chose, so explain reports their
//! reason instead of working it out again. The property test
//! `explain_agrees_with_dns` checks that a finding never contradicts the
//! served answer.
//!
//! It is a child module of the writer so it can read the writer's model
//! directly; it never changes it. Requests come over their own channel and
//! are served between batches ([`Writer::next_arrival`]); DNS readers never
//! wait for them. The admin side (`admin::explain`) adds what only it knows:
//! the real answer, the zones, and the watch scope.
//!
//! A file a kind of name: [`service`] (a Service and the names under it),
//! [`host`] (hostname names and the duplicate rule), [`address`] (names
//! spelled from an address: pod names and reverse names), [`rank`] (the
//! rank view); here, the channel, the dispatch on the parsed name, and
//! the names of no object (trees, namespaces). [`objects`] says how an
//! object is shown; [`findings`] is what is reported.

use std::net::IpAddr;

use tokio::sync::mpsc;

use super::*;
use crate::index::names::{QName, Tree};
use crate::index::{Lookup, names};

mod address;
mod findings;
mod host;
mod objects;
mod rank;
mod service;

pub use findings::{ExplainReceiver, ExplainRequest, Findings, MAX_LISTED, Object, Reason};

impl Writer {
    /// Give the writer the receiving end of the explain channel; requests
    /// are then answered between batches.
    pub fn with_explain(mut self, rx: ExplainReceiver) -> Self {
        self.explain_rx = Some(rx);
        self
    }

    /// The next arrival, answering explain requests while waiting for it.
    /// When both are ready the pick is random, so a steady stream of events
    /// cannot starve explain requests, nor a flood of requests the events.
    pub(super) fn next_arrival(&mut self, rx: &mut mpsc::Receiver<Arrival>) -> Option<Arrival> {
        // A stack temporary moved once per wait: boxing the arrival would
        // allocate on every batch for nothing.
        #[allow(clippy::large_enum_variant)]
        enum Next {
            Arrival(Option<Arrival>),
            Explain(Option<ExplainRequest>),
        }
        loop {
            let Some(erx) = self.explain_rx.as_mut() else {
                return rx.blocking_recv();
            };
            // The writer runs on a blocking thread: wait on both channels
            // with a local executor, as `blocking_recv` does for one.
            let next = futures::executor::block_on(async {
                tokio::select! {
                    e = erx.recv() => Next::Explain(e),
                    a = rx.recv() => Next::Arrival(a),
                }
            });
            match next {
                Next::Arrival(a) => return a,
                Next::Explain(Some(req)) => {
                    let findings = self.explain(&req.key);
                    let _ = req.reply.send(findings);
                }
                Next::Explain(None) => self.explain_rx = None,
            }
        }
    }

    /// What the model holds for one table key.
    pub fn explain(&self, key: &str) -> Findings {
        match QName::parse(key) {
            QName::Apex | QName::Reserved("ns.dns" | "dns-version") => {
                Findings::new(Reason::Server, "a name of the server itself, always served")
            }
            QName::Reserved(_) => Findings::new(
                Reason::EmptyNonTerminal,
                "a name above ns.dns, with no records of its own",
            ),
            QName::ReverseApex(_) => Findings::new(
                Reason::Server,
                "the apex of a reverse zone: podns serves its SOA and NS",
            ),
            QName::Reverse(ip) => self.explain_reverse(key, ip),
            QName::Tree(Tree::Rank) | QName::Namespace(Tree::Rank, _) | QName::Gang { .. }
                if !self.policy.rank_view =>
            {
                Findings::new(Reason::NoSuchName, "the rank view is off (--no-rank-view)")
            }
            QName::Tree(tree) => self.explain_tree(key, tree),
            QName::Namespace(tree, ns) => self.explain_namespace(key, ns, tree),
            QName::Service { svc, ns } => self.explain_service(key, ns, svc),
            QName::Host { host, sub, ns } if host.as_str().starts_with('_') => {
                self.explain_proto(key, ns, sub, host.as_str())
            }
            QName::Host { host, sub, ns } => self.explain_host(ns, sub, host),
            QName::Port {
                port,
                proto,
                svc,
                ns,
            } => self.explain_srv(ns, svc, port, proto),
            QName::Pod { label, ns } => self.explain_pod_name(ns, label),
            QName::Gang { first, rest, whole } => self.explain_rank(first, rest, whole),
            QName::Other if key.ends_with(".svc") => Findings::new(
                Reason::NoSuchName,
                "svc names have at most four labels before svc (_<port>._<proto>.<service>.<namespace>)",
            ),
            QName::Other if key.ends_with(".pod") => Findings::new(
                Reason::NoSuchName,
                "pod names are <a-b-c-d>.<namespace>.pod",
            ),
            QName::Other => Findings::new(
                Reason::NoSuchName,
                "names in a zone end in svc, pod or rank (or are the server's own); this one does not",
            ),
        }
    }

    /// Whether names with records lie below `key`, which has none of its
    /// own: the table's count, the one DNS answers NODATA from.
    pub(super) fn has_names_below(&self, key: &str) -> bool {
        self.table.lookup(key) == Lookup::Empty
    }

    fn explain_tree(&self, key: &str, tree: Tree) -> Findings {
        let t = tree.label();
        if self.has_names_below(key) {
            Findings::new(
                Reason::EmptyNonTerminal,
                format!("the {t} subtree: names below it, no records of its own"),
            )
        } else {
            Findings::new(
                Reason::NoSuchName,
                format!("nothing is published under the {t} subtree yet"),
            )
        }
    }

    fn explain_namespace(&self, key: &str, ns: &str, tree: Tree) -> Findings {
        let t = match tree {
            Tree::Svc => String::new(),
            other => format!("{} ", other.label()),
        };
        let known =
            self.ns_pods.contains_key(ns) || self.services.keys().any(|k| k.namespace == ns);
        let f = if self.has_names_below(key) {
            Findings::new(
                Reason::EmptyNonTerminal,
                format!("{t}namespace {ns}: names below it, no records of its own"),
            )
        } else if known {
            Findings::new(
                Reason::NoSuchName,
                format!("{t}namespace {ns}: its pods and Services publish no name here"),
            )
        } else {
            Findings::new(
                Reason::NoSuchName,
                format!("no pod or Service in namespace {ns} is known"),
            )
        };
        f.ns(ns)
    }
}

/// A label that spells an address, but not as DNS names carry it.
fn not_canonical(label: &str, ip: IpAddr) -> Findings {
    Findings::new(
        Reason::NoSuchName,
        format!(
            "{label} spells {ip}, but not canonically: DNS answers only {}",
            names::dashed(ip)
        ),
    )
}

#[cfg(test)]
mod tests;
