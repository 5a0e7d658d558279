//! `podns zonefile`: one list of Pods and one of Services, fed through the
//! same [`Writer`] as `podns serve`, then the whole index as RFC 1035 zone
//! text: what podns would answer, loadable by NSD and Knot DNS so a static
//! server can be diffed against podns or benchmarked on identical data.
//!
//! Output is one section per zone: every `--zone`, then with `--reverse`
//! `in-addr.arpa.` and `ip6.arpa.`. Each section starts with the line
//! `; podns zone <origin>` ([`SECTION_MARKER`]) followed by `$ORIGIN` and
//! `$TTL`, so `csplit -z - '/^; podns zone /' '{*}'` splits stdout;
//! `--out-dir DIR` writes `DIR/<origin>zone` files (`cluster.local.zone`)
//! instead. Same cluster state → byte-identical output: names are sorted,
//! records within a name are sorted, and the SOA serial is a hash of the
//! records (override with `--serial`).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use hickory_proto::rr::Name;
use kube::api::ListParams;

use crate::config::{ConfigError, ns_addrs_or_pod_ip};
use crate::dns::Zone;
use crate::dns::resolve::{AnswerConfig, Data, Owner, Records, Rules};
use crate::index::names::{IN_ADDR_ARPA, IP6_ARPA};
use crate::index::{Change, Policy, Rrs, SyncNeeds, Table, Update, Writer};
use crate::k8s::objects::{Slim, SlimEndpointSlice, SlimJob, SlimPod, SlimService};
use crate::k8s::wire::{RawWatched, Wire, list_page};
use crate::metrics::Metrics;

/// The first line of every zone section on stdout.
pub const SECTION_MARKER: &str = "; podns zone ";

/// What shapes the zone text besides the index.
#[derive(Clone, Debug)]
pub struct RenderConfig {
    pub ttl: u32,
    /// SOA MINIMUM: the TTL of negative answers (RFC 2308).
    pub negative_ttl: u32,
    /// Glue of `ns.dns.<zone>`.
    pub ns_addrs: Vec<IpAddr>,
    /// Also render `in-addr.arpa.` and `ip6.arpa.` with PTR records.
    pub reverse: bool,
    /// `None`: a hash of the records, so unchanged data keeps its serial.
    pub serial: Option<u32>,
}

/// One zone: its origin (fully qualified, lower case) and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneText {
    pub origin: String,
    pub text: String,
}

impl ZoneText {
    /// The file name `--out-dir` uses: `cluster.local.zone`, `in-addr.arpa.zone`.
    pub fn file_name(&self) -> String {
        format!("{}zone", self.origin)
    }
}

/// Every zone as one string (the sections of [`render_zones`], in order).
pub fn render(snapshot: &[(String, Arc<Rrs>)], zones: &[Name], cfg: &RenderConfig) -> String {
    render_zones(snapshot, zones, cfg)
        .into_iter()
        .map(|z| z.text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every zone as its own text. `snapshot` is [`Table::snapshot`]: forward
/// keys relative to each zone, reverse keys absolute. The records are the
/// answer rules' own ([`Rules::apex_records`], [`Rules::owned_records`]):
/// this module only spells them as zone text, in a stable order.
pub fn render_zones(
    snapshot: &[(String, Arc<Rrs>)],
    zones: &[Name],
    cfg: &RenderConfig,
) -> Vec<ZoneText> {
    if zones.is_empty() {
        return vec![];
    }
    let rules = Rules::new(AnswerConfig {
        zones: zones.to_vec(),
        ttl: cfg.ttl,
        negative_ttl: cfg.negative_ttl,
        ns_addrs: cfg.ns_addrs.clone(),
    });
    let apexes: Vec<&str> = rules.apexes().collect();
    // Records first, SOA last: the serial hashes the records.
    let mut bodies: Vec<(String, Section, String)> = Vec::new();
    for (i, apex) in apexes.iter().enumerate() {
        let body = forward_body(snapshot, &rules, i, apex);
        bodies.push((format!("{apex}."), Section::Forward(i), body));
    }
    if cfg.reverse {
        for apex in [IN_ADDR_ARPA, IP6_ARPA] {
            let body = reverse_body(snapshot, &rules, apex);
            bodies.push((format!("{apex}."), Section::Reverse(apex), body));
        }
    }
    let serial = cfg.serial.unwrap_or_else(|| {
        let mut h = Fnv::default();
        for (o, _, b) in &bodies {
            h.write(o.as_bytes());
            h.write(b.as_bytes());
        }
        h.finish32()
    });
    bodies
        .into_iter()
        .map(|(origin, section, body)| {
            let apex = origin.trim_end_matches('.');
            let mut text = String::new();
            let _ = writeln!(text, "{SECTION_MARKER}{origin}");
            let _ = writeln!(text, "$ORIGIN {origin}");
            let _ = writeln!(text, "$TTL {}", cfg.ttl);
            let head = match section {
                Section::Forward(i) => rules.apex_records(i, serial),
                Section::Reverse(apex) => rules.reverse_apex_records(apex, serial),
            };
            for r in head {
                if matches!(r.data, Data::Soa(_) | Data::Ns(_)) {
                    for (rtype, data) in rdata(&r) {
                        let owner = relative(&r.owner, apex, "@");
                        let _ = writeln!(text, "{owner}\t{}\tIN\t{rtype}\t{data}", r.ttl);
                    }
                }
            }
            text.push_str(&body);
            ZoneText { origin, text }
        })
        .collect()
}

/// Which kind of zone a section of the output is.
enum Section {
    /// The served zone at this index.
    Forward(usize),
    /// `in-addr.arpa` or `ip6.arpa`.
    Reverse(&'static str),
}

/// The records of a forward zone below the SOA and NS: the server's own
/// names, then the index's.
fn forward_body(snapshot: &[(String, Arc<Rrs>)], rules: &Rules, zone: usize, apex: &str) -> String {
    let mut out = String::new();
    let mut glue = Vec::new();
    let mut own = Vec::new();
    for r in rules.apex_records(zone, 0) {
        let owner = relative(&r.owner, apex, "@");
        for (rtype, data) in rdata(&r) {
            let line = format!("{owner}\t{}\tIN\t{rtype}\t{data}", r.ttl);
            match r.data {
                Data::Soa(_) | Data::Ns(_) => {}
                Data::Ip(_) => glue.push(line),
                _ => own.push(line),
            }
        }
    }
    glue.sort();
    for line in glue.iter().chain(&own) {
        let _ = writeln!(out, "{line}");
    }
    for (key, rrs) in snapshot {
        if is_reverse_key(key) || Rules::is_reserved(key) {
            continue;
        }
        names(
            &mut out,
            &escape_name(key),
            rules.owned_records(Owner::Question, rrs, zone),
        );
    }
    out
}

/// The PTR records under one reverse apex (`in-addr.arpa`).
fn reverse_body(snapshot: &[(String, Arc<Rrs>)], rules: &Rules, apex: &str) -> String {
    let suffix = format!(".{apex}");
    let mut out = String::new();
    for (key, rrs) in snapshot {
        let Some(rel) = key.strip_suffix(&suffix) else {
            continue;
        };
        names(
            &mut out,
            &escape_name(rel),
            rules.owned_records(Owner::Question, rrs, 0),
        );
    }
    out
}

/// One name's lines, each RRset sorted and without duplicates so the same
/// state gives the same bytes.
fn names<'a>(out: &mut String, owner: &str, records: impl IntoIterator<Item = Records<'a>>) {
    for r in records {
        let mut lines = rdata(&r);
        lines.dedup();
        for (rtype, data) in lines {
            let _ = writeln!(out, "{owner}\t{}\tIN\t{rtype}\t{data}", r.ttl);
        }
    }
}

/// An owner relative to the origin `apex`; the question's own name (a
/// snapshot key, spelled by the caller) is `question`.
fn relative(owner: &Owner<'_>, apex: &str, question: &str) -> String {
    match owner {
        Owner::Question => question.to_string(),
        Owner::Name(n) if n == apex => "@".to_string(),
        Owner::Name(n) => match n.strip_suffix(apex).and_then(|r| r.strip_suffix('.')) {
            Some(rel) => escape_name(rel),
            None => format!("{}.", escape_name(n)),
        },
    }
}

fn is_reverse_key(key: &str) -> bool {
    key == IN_ADDR_ARPA
        || key == IP6_ARPA
        || key.ends_with(".in-addr.arpa")
        || key.ends_with(".ip6.arpa")
}

/// Addresses in order, so the same set gives the same text.
fn sorted<T: Ord + Copy>(ips: &[T]) -> Vec<T> {
    let mut v = ips.to_vec();
    v.sort();
    v
}

/// The (type, rdata) text of each record of one plan entry, in a stable
/// order.
fn rdata(r: &Records<'_>) -> Vec<(&'static str, String)> {
    let abs = |n: &str| format!("{}.", escape_name(n));
    match &r.data {
        Data::A(rrs) => sorted(&rrs.a)
            .iter()
            .map(|ip| ("A", ip.to_string()))
            .collect(),
        Data::Aaaa(rrs) => sorted(&rrs.aaaa)
            .iter()
            .map(|ip| ("AAAA", ip.to_string()))
            .collect(),
        Data::Ip(IpAddr::V4(ip)) => vec![("A", ip.to_string())],
        Data::Ip(IpAddr::V6(ip)) => vec![("AAAA", ip.to_string())],
        Data::Cname(t) => vec![("CNAME", abs(t))],
        Data::Ptr(t) => vec![("PTR", abs(t))],
        Data::Ns(t) => vec![("NS", abs(t))],
        Data::Srv { rrs, weight, zone } => {
            let mut srv: Vec<String> = rrs
                .srv
                .iter()
                .map(|s| {
                    let target = abs(&format!("{}.{zone}", s.target));
                    format!("0 {weight} {} {target}", s.port)
                })
                .collect();
            srv.sort();
            srv.into_iter().map(|s| ("SRV", s)).collect()
        }
        Data::Txt(t) => vec![("TXT", quote(t))],
        Data::Soa(s) => {
            let [refresh, retry, expire] = s.timers;
            vec![(
                "SOA",
                format!(
                    "{}. {}. {} {refresh} {retry} {expire} {}",
                    s.mname, s.rname, s.serial, s.minimum
                ),
            )]
        }
    }
}

/// A name (dots separate labels) with every byte that is special in zone
/// text written as `\DDD` (RFC 1035 §5.1).
fn escape_name(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'*') {
            s.push(b as char);
        } else {
            let _ = write!(s, "\\{b:03}");
        }
    }
    s
}

/// A `<character-string>` in quotes, with `"`, `\` and non-printables escaped.
fn quote(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for b in text.bytes() {
        match b {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(b as char);
            }
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\{b:03}");
            }
        }
    }
    s.push('"');
    s
}

/// FNV-1a: a stable hash (std's hashers are seeded per process).
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish32(&self) -> u32 {
        (self.0 ^ (self.0 >> 32)) as u32
    }
}

/// Everything `podns zonefile` needs; the CLI maps its flags into this.
#[derive(Clone, Debug)]
pub struct ZonefileConfig {
    /// Zones to export.
    pub zones: Vec<Zone>,
    /// Also export `in-addr.arpa.` and `ip6.arpa.` with PTR records.
    pub reverse: bool,
    /// Export only the reverse zones (needs `reverse`).
    pub reverse_only: bool,
    /// One file per zone in this folder instead of stdout.
    pub out_dir: Option<std::path::PathBuf>,
    /// SOA serial (None: a hash of the records, stable for unchanged data).
    pub serial: Option<u32>,
    pub ttl: u32,
    pub negative_ttl: u32,
    /// Glue addresses of `ns.dns.<zone>` (empty: `$POD_IP`).
    pub ns_addrs: Vec<IpAddr>,
    pub policy: Policy,
    pub kubeconfig: Option<std::path::PathBuf>,
    pub context: Option<String>,
    /// Protobuf or JSON from the API server.
    pub wire: Wire,
}

impl Default for ZonefileConfig {
    fn default() -> Self {
        Self {
            zones: vec![Zone::cluster_local()],
            reverse: false,
            reverse_only: false,
            out_dir: None,
            serial: None,
            ttl: crate::dns::DEFAULT_TTL,
            negative_ttl: crate::dns::DEFAULT_NEGATIVE_TTL,
            ns_addrs: vec![],
            policy: Policy {
                rank_view: true,
                ..Policy::default()
            },
            kubeconfig: None,
            context: None,
            wire: Wire::Auto,
        }
    }
}

/// Check what the types cannot.
pub fn validate(args: &ZonefileConfig) -> Result<(), ConfigError> {
    crate::dns::check_zones(&args.zones, "exported with --reverse").map_err(ConfigError)?;
    if args.reverse_only && !args.reverse {
        return Err(ConfigError("--reverse-only needs --reverse".into()));
    }
    Ok(())
}

/// List everything once and build the index a fresh `podns serve` would
/// hold after its first sync.
pub async fn list_into_table(
    client: kube::Client,
    policy: Policy,
    wire: Wire,
) -> anyhow::Result<Arc<Table>> {
    let pods = list_all::<SlimPod>(client.clone(), wire, None).await?;
    let services = list_all::<SlimService>(client.clone(), wire, None).await?;
    // The user-managed EndpointSlices: optional, as in serve.
    let slices = list_all::<SlimEndpointSlice>(
        client.clone(),
        wire,
        Some(crate::k8s::watch::USER_SLICES),
    )
    .await
    .unwrap_or_else(|error| {
        tracing::warn!(error = %format!("{error:#}"), "no EndpointSlices: the export has no records of headless Services without a selector");
        Vec::new()
    });
    // The rank view's Jobs: optional, as in serve (no RBAC, no rank names).
    let jobs = if policy.rank_view {
        match list_all::<SlimJob>(client, wire, None).await {
            Ok(jobs) => jobs,
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "no Jobs: the export has no JobSet-wide ranks");
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let table = Table::new();
    let needs = SyncNeeds::one_list(true, true);
    let mut writer = Writer::new(table.clone(), policy, Metrics::new(), needs);
    let slices = slices.iter().filter_map(|e| e.convert().ok()).collect();
    writer.apply(Update::Slice(Change::all(slices)));
    let jobs = jobs.iter().filter_map(|j| j.convert().ok()).collect();
    writer.apply(Update::Job(Change::all(jobs)));
    let pods = pods
        .iter()
        .filter_map(|p| match p.convert() {
            Ok(info) => Some(info),
            Err(error) => {
                tracing::warn!(namespace = ?p.metadata.namespace, name = ?p.metadata.name, %error, "skipping pod");
                None
            }
        })
        .collect();
    let services = services
        .iter()
        .filter_map(|s| match s.convert() {
            Ok(info) => Some(info),
            Err(error) => {
                tracing::warn!(namespace = ?s.metadata.namespace, name = ?s.metadata.name, %error, "skipping service");
                None
            }
        })
        .collect();
    writer.apply(Update::Service(Change::all(services)));
    writer.apply(Update::Pod(Change::all(pods)));
    Ok(table)
}

/// A paginated list (pages of 500, as kubectl does), so a 100k-pod
/// cluster is not one response.
async fn list_all<K: RawWatched>(
    client: kube::Client,
    wire: Wire,
    labels: Option<&str>,
) -> anyhow::Result<Vec<K>> {
    let url = K::url_path(&(), None);
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    if let Some(labels) = labels {
        params = params.labels(labels);
    }
    loop {
        let (items, cont) = list_page::<K>(&client, wire, &url, &params)
            .await
            .with_context(|| format!("failed to list {}", K::plural(&())))?;
        out.extend(items);
        match cont {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    Ok(out)
}

/// The render configuration from the flags (and `$POD_IP`, as serve does).
pub fn render_config(args: &ZonefileConfig) -> RenderConfig {
    let ns_addrs = ns_addrs_or_pod_ip(&args.ns_addrs);
    RenderConfig {
        ttl: args.ttl,
        negative_ttl: args.negative_ttl,
        ns_addrs,
        reverse: args.reverse,
        serial: args.serial,
    }
}

/// Write each zone to `dir/<origin>zone`.
pub fn write_dir(dir: &Path, zones: &[ZoneText]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    for z in zones {
        let path = dir.join(z.file_name());
        std::fs::write(&path, &z.text)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(())
}

/// `podns zonefile`.
pub async fn run(args: ZonefileConfig) -> anyhow::Result<()> {
    validate(&args)?;
    let config =
        crate::config::kube_config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let url = config.cluster_url.clone();
    let client = crate::config::client_of(config)?;
    let table = list_into_table(client, args.policy, args.wire)
        .await
        .with_context(|| format!("the Kubernetes API at {url}"))?;
    let zones: Vec<Name> = args.zones.iter().map(|z| z.0.clone()).collect();
    let render = render_config(&args);
    if render.ns_addrs.is_empty() && !args.reverse_only {
        // The zone names ns.dns.<zone> as its NS and has no address for it:
        // kzonecheck rejects it and a secondary cannot find the primary.
        tracing::warn!(
            "no --ns-address (nor $POD_IP): ns.dns.<zone> has no glue address, so the zone fails kzonecheck; pass --ns-address with the server's IP"
        );
    }
    let mut texts = render_zones(&table.snapshot(), &zones, &render);
    if args.reverse_only {
        texts.retain(|z| z.origin.ends_with(".arpa."));
    }
    match &args.out_dir {
        Some(dir) => {
            write_dir(dir, &texts)?;
            for z in &texts {
                tracing::info!(path = %dir.join(z.file_name()).display(), "wrote zone");
            }
        }
        None => {
            use std::io::Write;
            let text = texts
                .into_iter()
                .map(|z| z.text)
                .collect::<Vec<_>>()
                .join("\n");
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .context("failed to write stdout")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
