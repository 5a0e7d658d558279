//! `GET /debug/explain?name=NAME&type=TYPE`: why a name answers what it
//! does. The real answer comes from the [`Answerer`] (the same rules DNS
//! uses); the objects and the rule come from the index writer
//! ([`crate::index::writer::explain`]); what neither can see (the zones, the
//! watch scope) is added here. Served only with `--admin-debug`: it shows
//! pods that DNS does not publish.

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::dns::answer::Answerer;
use crate::index::names::{Place, QName};
use crate::index::reverse::{Origin, ReverseZones};
use crate::index::writer::explain::{ExplainRequest, Findings, Reason};

/// How long an explain request may wait for the writer (it is served
/// between batches; a 100k-pod relist is seconds).
const WRITER_WAIT: Duration = Duration::from_secs(10);

/// How many answer records the text form prints (a gang's set may be thousands).
const TEXT_RECORDS: usize = 20;

/// What the explain endpoint needs, given to the admin server only with
/// `--admin-debug`.
#[derive(Clone)]
pub struct Explainer {
    pub answerer: Arc<Answerer>,
    pub writer: mpsc::Sender<ExplainRequest>,
    /// `--namespace` (empty: all).
    pub namespaces: Vec<String>,
    /// `--label-selector`.
    pub label_selector: Option<String>,
}

/// The whole explanation, as the endpoint sends it (JSON) or renders it
/// ([`Explanation::text`]).
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    /// The name as asked, fully qualified.
    pub name: String,
    #[serde(rename = "type")]
    pub qtype: String,
    /// NOERROR, NXDOMAIN, SERVFAIL, REFUSED, ...
    pub rcode: String,
    /// The answer section, one record a line in zone-file form.
    pub answer: Vec<String>,
    /// The writer's findings (rule or reason, detail, objects), or what
    /// this endpoint found before asking it.
    #[serde(flatten)]
    pub findings: Findings,
    /// For a reverse name: which case decided, inside a reverse zone
    /// podns owns (its authority: NXDOMAIN for an address no one holds) or
    /// outside every one (only the PTR of an address the index holds is
    /// answered there, anything else is REFUSED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse_zone: Option<String>,
    /// What else may matter (the nearer reason the index saw, when a scope
    /// reason is given first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A bad `name` or `type` parameter.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// A record type by name (`A`, `aaaa`, `SRV`) or number.
pub fn parse_type(s: &str) -> Result<RecordType, BadRequest> {
    let upper = s.to_ascii_uppercase();
    if let Ok(n) = upper.parse::<u16>() {
        return Ok(RecordType::from(n));
    }
    upper.parse::<RecordType>().map_err(|_| {
        BadRequest(format!(
            "unknown record type {s:?} (examples: A, AAAA, SRV, PTR, TXT)"
        ))
    })
}

/// A name as asked, made fully qualified.
pub fn parse_name(s: &str) -> Result<Name, BadRequest> {
    let s = s.trim();
    if s.is_empty() {
        return Err(BadRequest(
            "name is required (example: name=web-0.web.ml.svc.cluster.local)".into(),
        ));
    }
    let fq = if s.ends_with('.') {
        s.to_string()
    } else {
        format!("{s}.")
    };
    Name::from_ascii(&fq).map_err(|e| BadRequest(format!("invalid name {s:?}: {e}")))
}

/// Where the reverse zones came from, in a few words.
fn origin(zones: &ReverseZones) -> &'static str {
    match zones.origin() {
        Origin::Given => "given with --reverse-cidr",
        Origin::Learned => "learned from Nodes' spec.podCIDRs and ServiceCIDRs",
        Origin::All => "every reverse name",
    }
}

/// The owned reverse zones, the first few, for a sentence.
fn owned_list(zones: &ReverseZones) -> String {
    let mut owned: Vec<String> = zones
        .zones()
        .iter()
        .take(4)
        .map(|n| n.to_string())
        .collect();
    if zones.zones().len() > owned.len() {
        owned.push(format!("and {} more", zones.zones().len() - owned.len()));
    }
    if owned.is_empty() {
        "none yet".to_string()
    } else {
        owned.join(", ")
    }
}

/// Where a reverse name in no owned zone lies, in words.
fn outside(zones: &ReverseZones) -> String {
    let source = match zones.origin() {
        Origin::Given => "outside every --reverse-cidr",
        _ => {
            "in none of the ranges learned from Nodes' spec.podCIDRs and ServiceCIDRs (or above a zone of one)"
        }
    };
    format!(
        "the name is {source}: podns owns only the reverse zones {}",
        owned_list(zones)
    )
}

/// Why a reverse name outside the owned zones is REFUSED: not the PTR of
/// an address the index holds.
fn reverse_refused(zones: &ReverseZones, held: bool, qtype: RecordType, synced: bool) -> String {
    let why = if !synced {
        "the index is not synced yet (the first lists have not been applied)".to_string()
    } else if !held {
        "no pod, Service or endpoint podns knows holds that address".to_string()
    } else {
        format!("podns answers only PTR questions there, not {qtype}")
    };
    format!(
        "{}; outside them it answers the PTR of an address its index holds, but {why}: REFUSED, so a resolver asks its next server",
        outside(zones)
    )
}

impl Explainer {
    /// What DNS answers now: the rcode and the answer records.
    fn answer(&self, name: &Name, qtype: RecordType) -> (ResponseCode, Vec<String>) {
        let mut req = Message::new(0, MessageType::Query, OpCode::Query);
        req.add_query(Query::query(name.clone(), qtype));
        let resp = self.answerer.answer(&req);
        let answer = resp.answers.iter().map(ToString::to_string).collect();
        (resp.metadata.response_code, answer)
    }

    /// Explain `name` `qtype`: ask the answerer, then the writer, then the
    /// answerer again (see below).
    pub async fn explain(&self, name: &Name, qtype: RecordType) -> Explanation {
        let (rcode, answer) = self.answer(name, qtype);
        let mut out = Explanation {
            name: name.to_ascii(),
            qtype: qtype.to_string(),
            rcode: rcode_name(rcode),
            answer,
            findings: Findings::new(Reason::NoSuchName, String::new()),
            reverse_zone: None,
            notes: vec![],
        };
        let Some(key) = self.key(name) else {
            out.findings.reason = Reason::OutsideZones;
            let zones: Vec<String> = self
                .answerer
                .config()
                .zones
                .iter()
                .map(|z| z.to_ascii())
                .collect();
            out.findings.detail = format!(
                "{} is in none of the served zones ({}) and is not a reverse name: podns answers REFUSED and never recurses",
                out.name,
                zones.join(", ")
            );
            return out;
        };
        if matches!(
            QName::parse(&key),
            QName::Reverse(_) | QName::ReverseApex(_)
        ) {
            let zones = self.answerer.table().reverse_zones();
            match zones.zone_of(&key) {
                None if rcode == ResponseCode::Refused => {
                    let held = matches!(
                        self.answerer.table().lookup(&key),
                        crate::index::Lookup::Found(rrs) if rrs.ptr.is_some()
                    );
                    out.findings.reason = Reason::ReverseRefused;
                    let synced = self.answerer.table().is_synced();
                    out.findings.detail = reverse_refused(&zones, held, qtype, synced);
                    return out;
                }
                None => {
                    out.reverse_zone = Some(format!(
                        "{}; outside them podns answers the PTR of an address its index holds, as here",
                        outside(&zones)
                    ));
                }
                Some(z) if z.apex == key => {
                    out.findings.reason = Reason::Server;
                    out.findings.detail = format!(
                        "the apex of the reverse zone of {} ({}): podns serves its SOA and NS",
                        z.net,
                        origin(&zones)
                    );
                    return out;
                }
                Some(z) => {
                    out.reverse_zone = Some(format!(
                        "in the reverse zone {} of {} ({}): podns is its authority, and an address no one holds is NXDOMAIN",
                        z.apex,
                        z.net,
                        origin(&zones)
                    ));
                }
            }
        }
        if !self.answerer.table().is_synced() {
            out.findings.reason = Reason::NotSynced;
            out.findings.detail = "the index is not synced yet (the first list of Pods and Services has not been applied): every name in the zones answers SERVFAIL until it is".into();
            return out;
        }
        let findings = match self.ask_writer(key).await {
            Ok(f) => f,
            Err(e) => {
                out.notes.push(e);
                return out;
            }
        };
        // Events may have been applied while the request waited for the
        // writer, which answers between batches, once their names are
        // published: the answer asked again now is at least as new as the
        // findings, so the two never disagree about an event in between.
        let (rcode, answer) = self.answer(name, qtype);
        out.rcode = rcode_name(rcode);
        out.answer = answer;
        self.combine(&mut out, findings, rcode);
        out
    }

    /// The table key of a name: relative to the most specific zone, or the
    /// absolute reverse name; `None` outside the zones. Placed by the
    /// answer rules' own [`crate::dns::resolve::Rules::place`].
    fn key(&self, name: &Name) -> Option<String> {
        let lower = name.to_lowercase().to_ascii();
        let lower = lower.trim_end_matches('.');
        match self.answerer.rules().place(lower) {
            Place::Forward { rel, .. } => Some(rel.to_string()),
            Place::Reverse(name) => Some(name.to_string()),
            Place::Outside => None,
        }
    }

    async fn ask_writer(&self, key: String) -> Result<Findings, String> {
        let (tx, rx) = oneshot::channel();
        self.writer
            .send(ExplainRequest { key, reply: tx })
            .await
            .map_err(|_| "the index writer has stopped".to_string())?;
        match tokio::time::timeout(WRITER_WAIT, rx).await {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(_)) => Err("the index writer has stopped".into()),
            Err(_) => Err(format!(
                "the index writer did not answer within {} s (busy applying a large list?)",
                WRITER_WAIT.as_secs()
            )),
        }
    }

    /// The writer's findings against the real answer and the watch scope.
    fn combine(&self, out: &mut Explanation, f: Findings, rcode: ResponseCode) {
        let ns = f.namespace.clone();
        out.findings = f;
        let negative = out.answer.is_empty();
        if negative && rcode == ResponseCode::NoError && out.findings.reason.is_rule() {
            // The name exists; this type is not among its records.
            let detail = format!(
                "{} exists but has no {} records, so the answer is NODATA",
                out.name, out.qtype
            );
            out.supersede(Reason::NoRecordOfType, detail);
            return;
        }
        if !negative {
            return;
        }
        // What the writer cannot see: objects outside the watch scope.
        if let Some(ns) = &ns
            && !self.namespaces.is_empty()
            && !self.namespaces.iter().any(|n| n == ns)
        {
            let detail = format!(
                "namespace {ns} is not watched: podns runs with --namespace {}, so it sees no pod or Service there",
                self.namespaces.join(",")
            );
            out.supersede(Reason::NamespaceNotWatched, detail);
            return;
        }
        if ns.is_none()
            && !self.namespaces.is_empty()
            && matches!(out.findings.reason, Reason::NoPodWithIp)
        {
            out.notes.push(format!(
                "podns watches only namespaces {}: an IP of a pod elsewhere is unknown to it",
                self.namespaces.join(",")
            ));
        }
        if let Some(sel) = &self.label_selector
            && matches!(
                out.findings.reason,
                Reason::NoPod
                    | Reason::NoPodWithIp
                    | Reason::NoRank
                    | Reason::ServiceNoPublishedPods
            )
            && !out.findings.objects.iter().any(|o| o.kind == "pod")
        {
            let detail = format!(
                "no pod for this name is visible, and podns watches only pods matching --label-selector {sel}: a pod outside the selector would not be seen (podns cannot tell whether one exists)"
            );
            out.supersede(Reason::PodOutsideLabelSelector, detail);
        }
    }
}

impl Explanation {
    /// Replace the writer's reason with a nearer one, keeping the writer's
    /// as a note.
    fn supersede(&mut self, reason: Reason, detail: String) {
        let was = format!("{}: {}", self.findings.reason.code(), self.findings.detail);
        self.notes.push(was);
        self.findings.reason = reason;
        self.findings.detail = detail;
    }

    /// For a person: the answer, then why, then the objects.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{} {}: {}", self.name, self.qtype, self.rcode);
        for r in self.answer.iter().take(TEXT_RECORDS) {
            let _ = writeln!(s, "  {r}");
        }
        if self.answer.len() > TEXT_RECORDS {
            let _ = writeln!(
                s,
                "  ... and {} more records (--output json has them all)",
                self.answer.len() - TEXT_RECORDS
            );
        }
        let _ = writeln!(
            s,
            "why: {} ({})",
            self.findings.detail,
            self.findings.reason.code()
        );
        if let Some(z) = &self.reverse_zone {
            let _ = writeln!(s, "zone: {z}");
        }
        if !self.findings.objects.is_empty() {
            let _ = writeln!(s, "objects:");
        }
        for o in &self.findings.objects {
            let _ = write!(s, "  {} {}/{}: {}", o.kind, o.namespace, o.name, o.role);
            if let Some(t) = o.service_type {
                let _ = write!(s, ", {t}");
            }
            if !o.ips.is_empty() {
                let ips: Vec<String> = o.ips.iter().map(ToString::to_string).collect();
                let _ = write!(s, ", ip {}", ips.join(" "));
            } else if o.kind == "pod" {
                let _ = write!(s, ", no ip");
            }
            if let Some(p) = &o.phase {
                let _ = write!(s, ", {p}");
            }
            if let Some(r) = o.ready {
                let _ = write!(s, ", {}", if r { "Ready" } else { "not Ready" });
            }
            if o.terminating == Some(true) {
                let _ = write!(s, ", terminating");
            }
            match (o.published, o.not_published_because) {
                (Some(false), Some(r)) => {
                    let _ = write!(s, "; not published: {}", r.code());
                }
                (Some(true), _) => {
                    let _ = write!(s, "; published");
                }
                _ => {}
            }
            s.push('\n');
        }
        if self.findings.more_objects > 0 {
            let _ = writeln!(s, "  ... and {} more", self.findings.more_objects);
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

/// The mnemonic dig prints (`REFUSED`), not hickory's prose.
pub fn rcode_name(rcode: ResponseCode) -> String {
    match rcode {
        ResponseCode::NoError => "NOERROR".into(),
        ResponseCode::FormErr => "FORMERR".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::NXDomain => "NXDOMAIN".into(),
        ResponseCode::NotImp => "NOTIMP".into(),
        ResponseCode::Refused => "REFUSED".into(),
        other => format!("{other:?}").to_uppercase(),
    }
}
