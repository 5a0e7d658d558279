//! Service IP families and ClusterIP allocation, as kube-apiserver's Service
//! registry does them, for single- and dual-stack clusters.
//!
//! The rules follow kubernetes/kubernetes (read, not copied):
//! `pkg/registry/core/service/storage/alloc.go` (`initIPFamilyFields`,
//! `allocClusterIPs`, `updateClusterIPs`), `storage.go`
//! (`patchAllocatedValues`, `normalizeClusterIPs`), `strategy.go`
//! (`dropTypeDependentFields`) and `pkg/apis/core/validation`
//! (`ValidateServiceClusterIPsRelatedFields`,
//! `validateUpgradeDowngradeClusterIPs`, `validateUpgradeDowngradeIPFamilies`).
//!
//! The order of the API server is kept, because it decides which error a
//! client sees: a create defaults and allocates, then validates; an update
//! validates the user's change first, then defaults and allocates.
//!
//! The cluster's first service CIDR is the primary family
//! (`--service-cluster-ip-range=<primary>,<secondary>`); a cluster is
//! dual-stack when it has two.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Value, json};

use crate::field::{BadValue, FieldError};
use crate::store::{ApiError, Kind};

/// An IP family, as `spec.ipFamilies` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
    fn parse(s: &str) -> Option<Family> {
        match s {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        }
    }
    fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
    fn other(self) -> Family {
        match self {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        }
    }
}

/// Why a service CIDR cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ServiceNetError {
    #[error("a cluster has one or two service CIDRs, not {0}")]
    Count(usize),
    #[error("the two service CIDRs must be of different IP families: {0} and {1}")]
    SameFamily(IpNet, IpNet),
    #[error("service CIDR {0} has no usable addresses")]
    TooSmall(IpNet),
}

/// Why an allocation failed: the allocator's errors, worded as the
/// apiserver words them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum AllocError {
    #[error("the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}")]
    NotInRange { ip: IpAddr, range: IpNet },
    #[error("provided IP is already allocated")]
    Allocated,
    #[error("range is full")]
    Full,
}

/// One service CIDR and the addresses taken from it. Offsets count from
/// the network address; the network address (and, for IPv4, broadcast)
/// are never handed out.
#[derive(Debug)]
struct Range {
    net: IpNet,
    base: u128,
    last: u128,
    /// Offsets below this are the "static band": dynamic allocation takes
    /// from above it first, so addresses users pick by hand (the
    /// conventional `10.96.0.10` of kube-dns) rarely collide
    /// (KEP-3070, `calculateRangeOffset`).
    band: u128,
    used: BTreeSet<u128>,
    /// Where the next dynamic allocation starts looking: addresses are
    /// handed out in order, fresh ones before released ones.
    next: u128,
}

impl Range {
    fn new(net: IpNet) -> Result<Range, ServiceNetError> {
        let net = net.trunc();
        let host = u32::from(net.max_prefix_len() - net.prefix_len());
        // Keep offsets far from overflow; no simulated cluster comes near.
        let size = 1u128 << host.min(64);
        let last = match net {
            IpNet::V4(_) => size.saturating_sub(2),
            IpNet::V6(_) => size - 1,
        };
        if last < 1 {
            return Err(ServiceNetError::TooSmall(net));
        }
        let band = if size <= 16 {
            0
        } else {
            (size / 16).clamp(16, 256)
        };
        let base = match net.network() {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        let next = if band < last { band + 1 } else { 1 };
        Ok(Range {
            net,
            base,
            last,
            band,
            used: BTreeSet::new(),
            next,
        })
    }

    fn family(&self) -> Family {
        Family::of(&self.net.network())
    }

    fn addr(&self, off: u128) -> IpAddr {
        match self.net {
            IpNet::V4(_) => IpAddr::V4(((self.base + off) as u32).into()),
            IpNet::V6(_) => IpAddr::V6((self.base + off).into()),
        }
    }

    fn offset(&self, ip: &IpAddr) -> Option<u128> {
        if !self.net.contains(ip) {
            return None;
        }
        let n = match ip {
            IpAddr::V4(a) => u128::from(u32::from(*a)),
            IpAddr::V6(a) => u128::from(*a),
        };
        let off = n - self.base;
        (1..=self.last).contains(&off).then_some(off)
    }

    fn allocate(&mut self, ip: &IpAddr) -> Result<(), AllocError> {
        let off = self.offset(ip).ok_or(AllocError::NotInRange {
            ip: *ip,
            range: self.net,
        })?;
        if self.used.insert(off) {
            Ok(())
        } else {
            Err(AllocError::Allocated)
        }
    }

    fn allocate_next(&mut self) -> Result<IpAddr, AllocError> {
        let upper = (self.band + 1).min(self.last);
        let found = self
            .free_in(self.next.max(upper), self.last)
            .or_else(|| self.free_in(upper, self.next.max(upper)))
            .or_else(|| self.free_in(1, upper));
        let off = found.ok_or(AllocError::Full)?;
        self.used.insert(off);
        self.next = if off >= self.last { upper } else { off + 1 };
        Ok(self.addr(off))
    }

    /// The first free offset in `[from, to]`.
    fn free_in(&self, from: u128, to: u128) -> Option<u128> {
        if from > to {
            return None;
        }
        let mut o = from;
        for &u in self.used.range(from..=to) {
            if u != o {
                break;
            }
            o += 1;
        }
        (o <= to).then_some(o)
    }

    fn release(&mut self, ip: &IpAddr) {
        if let Some(off) = self.offset(ip) {
            self.used.remove(&off);
        }
    }
}

/// The cluster's service CIDRs (primary first) and what is allocated.
#[derive(Debug)]
pub struct ServiceNet {
    ranges: Vec<Range>,
}

impl Default for ServiceNet {
    /// kube-apiserver's default `--service-cluster-ip-range`.
    fn default() -> Self {
        ServiceNet::new(&["10.96.0.0/12".parse().expect("a valid CIDR")])
            .expect("the default range is usable")
    }
}

/// How an operation failed before it reached the store.
enum Fail {
    Fields(Vec<FieldError>),
    Internal(String),
}

impl Fail {
    fn into_api(self, name: &str) -> ApiError {
        match self {
            Fail::Fields(errs) => ApiError::invalid_fields(Kind::Service, name, &errs),
            Fail::Internal(msg) => ApiError::new(
                500,
                "InternalError",
                format!("Internal error occurred: {msg}"),
            )
            .with_details(json!({"causes": [{"message": msg}]})),
        }
    }
}

impl ServiceNet {
    /// `cidrs` in the order of `--service-cluster-ip-range`: the first one's
    /// family is the primary family.
    pub fn new(cidrs: &[IpNet]) -> Result<ServiceNet, ServiceNetError> {
        if cidrs.is_empty() || cidrs.len() > 2 {
            return Err(ServiceNetError::Count(cidrs.len()));
        }
        let ranges = cidrs
            .iter()
            .map(|c| Range::new(*c))
            .collect::<Result<Vec<_>, _>>()?;
        if ranges.len() == 2 && ranges[0].family() == ranges[1].family() {
            return Err(ServiceNetError::SameFamily(ranges[0].net, ranges[1].net));
        }
        Ok(ServiceNet { ranges })
    }

    /// The primary family (of the first CIDR).
    pub fn primary(&self) -> Family {
        self.ranges[0].family()
    }

    pub fn dual_stack(&self) -> bool {
        self.ranges.len() == 2
    }

    /// The first address of the primary range: the `kubernetes` Service's.
    pub fn first_ip(&self) -> IpAddr {
        self.ranges[0].addr(1)
    }

    fn range(&mut self, f: Family) -> Option<&mut Range> {
        self.ranges.iter_mut().find(|r| r.family() == f)
    }

    fn configured(&self, f: Family) -> bool {
        self.ranges.iter().any(|r| r.family() == f)
    }

    /// Defaults and allocates the IP fields of a Service being created;
    /// rejects what the apiserver rejects.
    pub fn create(&mut self, name: &str, spec: &mut Value) -> Result<(), ApiError> {
        let mut s = Spec::read(spec)?;
        // beginCreate: normalize, init families, allocate ...
        s.normalize(None);
        let allocated = self
            .init_families(&mut s, None)
            .and_then(|()| self.alloc_cluster_ips(&mut s))
            .map_err(|f| f.into_api(name))?;
        // ... then the create strategy validates the result.
        let errs = validate_service(&s);
        if !errs.is_empty() {
            self.release_all(&allocated);
            return Err(ApiError::invalid_fields(Kind::Service, name, &errs));
        }
        s.write(spec);
        Ok(())
    }

    /// Applies an update of a stored Service's spec: only the changes the
    /// apiserver allows (an upgrade to dual-stack allocates the secondary
    /// IP, a downgrade releases it, a type change to or from ExternalName
    /// allocates or releases everything); anything else is rejected.
    pub fn update(&mut self, name: &str, old: &Value, new: &mut Value) -> Result<(), ApiError> {
        let old = Spec::read(old)?;
        let mut s = Spec::read(new)?;
        // PrepareForUpdate.
        s.patch_allocated(&old);
        s.normalize(Some(&old));
        s.drop_type_dependent(&old);
        // ValidateUpdate, on the user's intent before any defaulting.
        let mut errs = upgrade_downgrade_cluster_ips(&old, &s);
        errs.extend(upgrade_downgrade_families(&old, &s));
        errs.extend(validate_service(&s));
        if !errs.is_empty() {
            return Err(ApiError::invalid_fields(Kind::Service, name, &errs));
        }
        // beginUpdate: init families, then allocate or release.
        self.init_families(&mut s, Some(&old))
            .map_err(|f| f.into_api(name))?;
        let released = self
            .update_cluster_ips(&mut s, &old)
            .map_err(|f| f.into_api(name))?;
        self.release_all(&released);
        s.write(new);
        Ok(())
    }

    /// Releases the cluster IPs of a deleted Service.
    pub fn release(&mut self, spec: &Value) {
        let Ok(s) = Spec::read(spec) else { return };
        if s.external_name() || s.cluster_ips.first().is_some_and(|ip| ip == NONE) {
            return;
        }
        let ips: Vec<IpAddr> = s
            .cluster_ips
            .iter()
            .filter_map(|i| i.parse().ok())
            .collect();
        self.release_all(&ips);
    }

    fn release_all(&mut self, ips: &[IpAddr]) {
        for ip in ips {
            if let Some(r) = self.range(Family::of(ip)) {
                r.release(ip);
            }
        }
    }

    /// `initIPFamilyFields`: default `ipFamilyPolicy` and `ipFamilies`
    /// from the policy, the given cluster IPs and the cluster's families.
    fn init_families(&self, s: &mut Spec, old: Option<&Spec>) -> Result<(), Fail> {
        if s.external_name() || matching_prefer_dual_stack(s, old) {
            return Ok(());
        }
        if s.policy.is_none() {
            s.policy = Some(if let Some(p) = old.and_then(|o| o.policy.clone()) {
                p
            } else if s.cluster_ip == NONE && !s.selector {
                // Headless and selectorless: the endpoints are the user's,
                // of any family, so both families are assumed.
                REQUIRE.into()
            } else {
                SINGLE.into()
            });
        }
        let errs = validate_cluster_ips_related(s);
        if !errs.is_empty() {
            return Err(Fail::Fields(errs));
        }
        let mut errs = Vec::new();
        let policy = s.policy.clone().unwrap_or_default();
        if let Some(old) = old {
            if policy == SINGLE {
                // Setting SingleStack without touching the lists is a clear
                // intent to drop the secondary; clusterIPs[0] stays.
                if s.cluster_ips == old.cluster_ips && s.cluster_ips.len() > 1 {
                    s.cluster_ips.truncate(1);
                }
                if s.families == old.families && s.families.len() > 1 {
                    s.families.truncate(1);
                }
            } else {
                if !s.cluster_ips.is_empty() && s.cluster_ips.len() < old.cluster_ips.len() {
                    errs.push(policy_error(
                        &policy,
                        "must be 'SingleStack' to release the secondary cluster IP",
                    ));
                }
                if !s.families.is_empty() && s.families.len() < old.families.len() {
                    errs.push(policy_error(
                        &policy,
                        "must be 'SingleStack' to release the secondary IP family",
                    ));
                }
            }
        }
        if policy == SINGLE {
            if s.cluster_ips.len() == 2 {
                errs.push(policy_error(
                    &policy,
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
                ));
            }
            if s.families.len() == 2 {
                errs.push(policy_error(
                    &policy,
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
                ));
            }
        }
        // Families not given are inferred from the cluster IPs given.
        for (i, ip) in s.cluster_ips.clone().iter().enumerate() {
            if ip == NONE {
                break;
            }
            let Ok(addr) = ip.parse::<IpAddr>() else {
                break;
            };
            let fam = Family::of(&addr);
            if i >= s.families.len() {
                if self.configured(fam) {
                    s.families.push(fam.name().into());
                } else {
                    errs.push(FieldError::invalid(
                        format!("spec.clusterIPs[{i}]"),
                        ips_value(&s.cluster_ips),
                        format!("{} is not configured on this cluster", fam.name()),
                    ));
                }
            }
        }
        if !errs.is_empty() {
            return Err(Fail::Fields(errs));
        }
        if s.cluster_ip == NONE && !s.selector {
            // Headless and selectorless may name families the cluster does
            // not have: they only describe the user's endpoints.
            if s.families.is_empty() {
                s.families.push(self.primary().name().into());
            }
            if s.families.len() < 2 && policy != SINGLE {
                let other = Family::parse(&s.families[0]).map_or(Family::V6, Family::other);
                s.families.push(other.name().into());
            }
            return Ok(());
        }
        if policy == REQUIRE && !self.dual_stack() {
            errs.push(policy_error(
                &policy,
                "this cluster is not configured for dual-stack services",
            ));
        }
        for (i, f) in s.families.iter().enumerate() {
            if !Family::parse(f).is_some_and(|f| self.configured(f)) {
                errs.push(FieldError::invalid(
                    format!("spec.ipFamilies[{i}]"),
                    BadValue::Str(f.clone()),
                    "not configured on this cluster",
                ));
            }
        }
        if !errs.is_empty() {
            return Err(Fail::Fields(errs));
        }
        if s.families.is_empty() {
            s.families.push(self.primary().name().into());
        }
        if policy != SINGLE && s.families.len() == 1 && self.dual_stack() {
            let other = Family::parse(&s.families[0]).map_or(Family::V6, Family::other);
            s.families.push(other.name().into());
        }
        Ok(())
    }

    /// `allocClusterIPs`: one IP per family, the given one if any.
    /// Returns what it allocated.
    fn alloc_cluster_ips(&mut self, s: &mut Spec) -> Result<Vec<IpAddr>, Fail> {
        if s.external_name() || s.cluster_ips.first().is_some_and(|ip| ip == NONE) {
            return Ok(Vec::new());
        }
        while s.cluster_ips.len() < s.families.len() {
            s.cluster_ips.push(String::new());
        }
        let want: Vec<(usize, String)> = (0..s.families.len())
            .map(|i| (i, s.cluster_ips[i].clone()))
            .collect();
        let got = self.alloc_ips(s, &want)?;
        for (i, ip) in &got {
            s.cluster_ips[*i] = ip.to_string();
        }
        s.cluster_ip = s.cluster_ips[0].clone();
        Ok(got.into_iter().map(|(_, ip)| ip).collect())
    }

    /// `allocIPs`: for each `(index, ip)`, the next free address of family
    /// `families[index]` when `ip` is empty, else that address. All or
    /// nothing.
    fn alloc_ips(
        &mut self,
        s: &Spec,
        want: &[(usize, String)],
    ) -> Result<Vec<(usize, IpAddr)>, Fail> {
        let mut got: Vec<(usize, IpAddr)> = Vec::new();
        let mut fail = None;
        for (i, ip) in want {
            let fam = Family::parse(&s.families[*i]).expect("families are validated");
            let range = self.range(fam).expect("families are configured");
            if ip.is_empty() {
                match range.allocate_next() {
                    Ok(a) => got.push((*i, a)),
                    Err(e) => {
                        fail = Some(Fail::Internal(format!(
                            "failed to allocate a serviceIP: {e}"
                        )));
                        break;
                    }
                }
            } else {
                let addr: IpAddr = ip.parse().expect("clusterIPs are validated");
                match range.allocate(&addr) {
                    Ok(()) => got.push((*i, addr)),
                    Err(e) => {
                        fail = Some(Fail::Fields(vec![FieldError::invalid(
                            "spec.clusterIPs",
                            ips_value(&s.cluster_ips),
                            format!("failed to allocate IP {ip}: {e}"),
                        )]));
                        break;
                    }
                }
            }
        }
        if let Some(f) = fail {
            let undo: Vec<IpAddr> = got.iter().map(|(_, a)| *a).collect();
            self.release_all(&undo);
            return Err(f);
        }
        Ok(got)
    }

    /// `updateClusterIPs`: allocates what an update adds and returns what
    /// it gives up (released once the update is accepted).
    fn update_cluster_ips(&mut self, s: &mut Spec, old: &Spec) -> Result<Vec<IpAddr>, Fail> {
        if matching_prefer_dual_stack(s, Some(old)) {
            return Ok(Vec::new());
        }
        if old.external_name() && !s.external_name() {
            self.alloc_cluster_ips(s)?;
            return Ok(Vec::new());
        }
        if old.cluster_ips.first().is_some_and(|ip| ip == NONE) {
            return Ok(Vec::new());
        }
        let old_ips: Vec<IpAddr> = old
            .cluster_ips
            .iter()
            .filter_map(|i| i.parse().ok())
            .collect();
        if !old.external_name() && s.external_name() {
            return Ok(old_ips);
        }
        let upgraded = old.families.len() == 1 && s.families.len() == 2;
        let downgraded = old.families.len() == 2 && s.families.len() == 1;
        if upgraded {
            if s.cluster_ips.len() < 2 {
                s.cluster_ips.push(String::new());
            }
            let want = [(1, s.cluster_ips[1].clone())];
            let got = self.alloc_ips(s, &want)?;
            s.cluster_ips[1] = got[0].1.to_string();
        } else if downgraded {
            return Ok(old_ips.into_iter().skip(1).collect());
        }
        Ok(Vec::new())
    }
}

const NONE: &str = "None";
const SINGLE: &str = "SingleStack";
const PREFER: &str = "PreferDualStack";
const REQUIRE: &str = "RequireDualStack";
const EXTERNAL_NAME: &str = "ExternalName";

fn ips_value(ips: &[String]) -> BadValue {
    BadValue::List("string", ips.to_vec())
}

fn families_value(f: &[String]) -> BadValue {
    BadValue::List("core.IPFamily", f.to_vec())
}

fn policy_error(policy: &str, detail: &str) -> FieldError {
    FieldError::invalid(
        "spec.ipFamilyPolicy",
        BadValue::Str(policy.to_string()),
        detail,
    )
}

/// The IP fields of a Service spec, as the registry sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Spec {
    ty: String,
    cluster_ip: String,
    cluster_ips: Vec<String>,
    families: Vec<String>,
    policy: Option<String>,
    selector: bool,
    external_name: String,
}

impl Spec {
    fn read(spec: &Value) -> Result<Spec, ApiError> {
        let bad = |f: &str, want: &str| {
            ApiError::bad_request(format!(
                "Service in version \"v1\" cannot be handled as a Service: spec.{f}: expected {want}"
            ))
        };
        let string = |f: &str| -> Result<String, ApiError> {
            match spec.get(f) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(bad(f, "a string")),
            }
        };
        let list = |f: &str| -> Result<Vec<String>, ApiError> {
            match spec.get(f) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad(f, "a list of strings"))
                    })
                    .collect(),
                Some(_) => Err(bad(f, "a list of strings")),
            }
        };
        let ty = string("type")?;
        let policy = string("ipFamilyPolicy")?;
        Ok(Spec {
            ty: if ty.is_empty() {
                "ClusterIP".into()
            } else {
                ty
            },
            cluster_ip: string("clusterIP")?,
            cluster_ips: list("clusterIPs")?,
            families: list("ipFamilies")?,
            policy: (!policy.is_empty()).then_some(policy),
            selector: spec["selector"].as_object().is_some_and(|m| !m.is_empty()),
            external_name: string("externalName")?,
        })
    }

    fn write(&self, spec: &mut Value) {
        if !spec.is_object() {
            *spec = json!({});
        }
        let m = spec.as_object_mut().expect("just made an object");
        m.insert("type".into(), self.ty.clone().into());
        let mut put = |k: &str, v: Option<Value>| match v {
            Some(v) => {
                m.insert(k.into(), v);
            }
            None => {
                m.remove(k);
            }
        };
        put(
            "clusterIP",
            (!self.cluster_ip.is_empty()).then(|| self.cluster_ip.clone().into()),
        );
        put(
            "clusterIPs",
            (!self.cluster_ips.is_empty()).then(|| json!(self.cluster_ips)),
        );
        put(
            "ipFamilies",
            (!self.families.is_empty()).then(|| json!(self.families)),
        );
        put("ipFamilyPolicy", self.policy.clone().map(Value::from));
    }

    fn external_name(&self) -> bool {
        self.ty == EXTERNAL_NAME
    }

    fn headless(&self) -> bool {
        self.cluster_ips.len() == 1 && self.cluster_ips[0] == NONE
    }

    /// `patchAllocatedValues`: a client that resubmits its original
    /// manifest (no clusterIP) keeps what was allocated for it.
    fn patch_allocated(&mut self, old: &Spec) {
        if !old.external_name() && !self.external_name() {
            if self.cluster_ip.is_empty() {
                self.cluster_ip = old.cluster_ip.clone();
            }
            if self.cluster_ips.is_empty() && !old.cluster_ips.is_empty() {
                self.cluster_ips = old.cluster_ips.clone();
            }
        }
    }

    /// `normalizeClusterIPs`: keep `clusterIP` and `clusterIPs` in step for
    /// clients that only know the singular field.
    fn normalize(&mut self, old: Option<&Spec>) {
        let Some(old) = old else {
            if !self.cluster_ip.is_empty() && self.cluster_ips.is_empty() {
                self.cluster_ips = vec![self.cluster_ip.clone()];
            }
            return;
        };
        if !old.cluster_ips.is_empty()
            && self.cluster_ips.is_empty()
            && old.cluster_ip == self.cluster_ip
        {
            self.cluster_ips = old.cluster_ips.clone();
        }
        if old.cluster_ip != self.cluster_ip {
            if !old.cluster_ip.is_empty() && self.cluster_ip.is_empty() {
                if old.cluster_ips == self.cluster_ips {
                    self.cluster_ips.clear();
                }
            } else if old.cluster_ips == self.cluster_ips {
                self.cluster_ips = vec![self.cluster_ip.clone()];
            }
        }
    }

    /// `dropTypeDependentFields`: a change to ExternalName clears the IP
    /// fields the user did not also change (they are released later).
    fn drop_type_dependent(&mut self, old: &Spec) {
        if !old.external_name() && self.external_name() {
            if self.cluster_ips == old.cluster_ips {
                self.cluster_ip.clear();
                self.cluster_ips.clear();
            }
            if self.families == old.families {
                self.families.clear();
            }
            if self.policy == old.policy {
                self.policy = None;
            }
        }
    }
}

/// `isMatchingPreferDualStackClusterIPFields`: a PreferDualStack Service
/// whose IP fields did not change is left alone, so a cluster that
/// changes its dual-stackness never silently upgrades or downgrades it.
fn matching_prefer_dual_stack(s: &Spec, old: Option<&Spec>) -> bool {
    let Some(old) = old else { return false };
    s.policy.is_some()
        && old.ty == s.ty
        && matches!(s.ty.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer")
        && s.policy.as_deref() == Some(PREFER)
        && old.policy.as_deref().is_none_or(|p| p == PREFER)
        && s.cluster_ips == old.cluster_ips
        && s.families == old.families
}

/// The parts of `ValidateService` about these fields: ExternalName
/// carries none of them; other types must be consistent.
fn validate_service(s: &Spec) -> Vec<FieldError> {
    if !s.external_name() {
        return validate_cluster_ips_related(s);
    }
    let mut errs = Vec::new();
    if !s.cluster_ips.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.clusterIPs",
            "may not be set for ExternalName services",
        ));
    }
    if !s.families.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.ipFamilies",
            "may not be set for ExternalName services",
        ));
    }
    if s.policy.is_some() {
        errs.push(FieldError::forbidden(
            "spec.ipFamilyPolicy",
            "may not be set for ExternalName services",
        ));
    }
    if s.external_name.trim_end_matches('.').is_empty() {
        errs.push(FieldError::required("spec.externalName"));
    }
    errs
}

/// `ValidateServiceClusterIPsRelatedFields`.
fn validate_cluster_ips_related(s: &Spec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s.external_name() {
        return errs;
    }
    if !s.cluster_ip.is_empty() {
        if s.cluster_ips.is_empty() {
            errs.push(FieldError::required("spec.clusterIPs"));
        } else if s.cluster_ips[0] != s.cluster_ip {
            errs.push(FieldError::invalid(
                "spec.clusterIPs",
                ips_value(&s.cluster_ips),
                "first value must match `clusterIP`",
            ));
        }
    } else if !s.cluster_ips.is_empty() {
        errs.push(FieldError::invalid(
            "spec.clusterIPs",
            ips_value(&s.cluster_ips),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let mut seen = Vec::new();
    for (i, f) in s.families.iter().enumerate() {
        if Family::parse(f).is_none() {
            errs.push(FieldError::not_supported(
                format!("spec.ipFamilies[{i}]"),
                BadValue::Str(f.clone()),
                &["IPv4", "IPv6"],
            ));
        }
        if seen.contains(&f) {
            errs.push(FieldError::duplicate(
                format!("spec.ipFamilies[{i}]"),
                BadValue::Str(f.clone()),
            ));
        }
        seen.push(f);
    }
    if let Some(p) = &s.policy
        && ![SINGLE, PREFER, REQUIRE].contains(&p.as_str())
    {
        errs.push(FieldError::not_supported(
            "spec.ipFamilyPolicy",
            BadValue::Str(p.clone()),
            &[PREFER, REQUIRE, SINGLE],
        ));
    }
    let mut bad_ips = false;
    let mut addrs = Vec::new();
    for (i, ip) in s.cluster_ips.iter().enumerate() {
        if i == 0 && ip == NONE {
            if s.cluster_ips.len() > 1 {
                bad_ips = true;
                errs.push(FieldError::invalid(
                    "spec.clusterIPs",
                    ips_value(&s.cluster_ips),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        match ip.parse::<IpAddr>() {
            Ok(a) => addrs.push(a),
            Err(_) => {
                bad_ips = true;
                errs.push(FieldError::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    BadValue::Str(ip.clone()),
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                ));
            }
        }
    }
    if s.cluster_ips.len() > 2 {
        errs.push(FieldError::invalid(
            "spec.clusterIPs",
            ips_value(&s.cluster_ips),
            "may only hold up to 2 values",
        ));
    }
    if bad_ips {
        return errs;
    }
    if s.cluster_ips.len() > 1 {
        let dual = addrs.len() == 2 && Family::of(&addrs[0]) != Family::of(&addrs[1]);
        if !dual {
            errs.push(FieldError::invalid(
                "spec.clusterIPs",
                ips_value(&s.cluster_ips),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if !s.headless() && !s.cluster_ips.is_empty() && !s.families.is_empty() {
        for (i, (ip, f)) in addrs.iter().zip(&s.families).enumerate() {
            let want = match f.as_str() {
                "IPv4" => Family::V4,
                "IPv6" => Family::V6,
                _ => continue,
            };
            if Family::of(ip) != want {
                errs.push(FieldError::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    BadValue::Str(s.cluster_ips[i].clone()),
                    format!(
                        "expected an {} value as indicated by `ipFamilies[{i}]`",
                        want.name()
                    ),
                ));
            }
        }
    }
    errs
}

/// `validateUpgradeDowngradeClusterIPs`: the primary IP never changes; the
/// secondary may be added, or released with policy SingleStack.
fn upgrade_downgrade_cluster_ips(old: &Spec, s: &Spec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s.external_name() || old.external_name() || (old.headless() && s.headless()) {
        return errs;
    }
    let changed = || {
        FieldError::invalid(
            "spec.clusterIPs[0]",
            ips_value(&s.cluster_ips),
            "may not change once set",
        )
    };
    let (o, n) = (&old.cluster_ips, &s.cluster_ips);
    if o.len() == n.len() {
        for (i, ip) in o.iter().enumerate() {
            if *ip != n[i] {
                errs.push(FieldError::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    ips_value(n),
                    "may not change once set",
                ));
            }
        }
    } else if o.len() > n.len() {
        if n.is_empty() {
            errs.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                ips_value(n),
                "primary clusterIP can not be unset",
            ));
        }
        if !o.is_empty() && !n.is_empty() && n[0] != o[0] {
            errs.push(changed());
        }
        if n.len() == 1 && s.policy.as_deref() != Some(SINGLE) {
            errs.push(FieldError::invalid(
                "spec.ipFamilyPolicy",
                BadValue::opt(s.policy.as_deref()),
                "must be set to 'SingleStack' when releasing the secondary clusterIP",
            ));
        }
    } else if !o.is_empty() && n[0] != o[0] {
        errs.push(changed());
    }
    errs
}

/// `validateUpgradeDowngradeIPFamilies`: the primary family never changes
/// (headless Services excepted); the secondary follows the clusterIPs rule.
fn upgrade_downgrade_families(old: &Spec, s: &Spec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s.external_name() || old.external_name() || old.headless() || s.headless() {
        return errs;
    }
    let (o, n) = (&old.families, &s.families);
    if o.len() == n.len() {
        for (i, f) in o.iter().enumerate() {
            if *f != n[i] {
                errs.push(FieldError::invalid(
                    "spec.ipFamilies[0]",
                    families_value(n),
                    "may not change once set",
                ));
            }
        }
    } else if o.len() > n.len() {
        if s.cluster_ips.is_empty() {
            errs.push(FieldError::invalid(
                "spec.ipFamilies[0]",
                families_value(n),
                "primary ipFamily can not be unset",
            ));
        }
        if !n.is_empty() && n[0] != o[0] {
            errs.push(FieldError::invalid(
                "spec.ipFamilies[0]",
                ips_value(&s.cluster_ips),
                "may not change once set",
            ));
        }
        if n.len() == 1 && s.policy.as_deref() != Some(SINGLE) {
            errs.push(FieldError::invalid(
                "spec.ipFamilyPolicy",
                BadValue::opt(s.policy.as_deref()),
                "must be set to 'SingleStack' when releasing the secondary ipFamily",
            ));
        }
    } else if !o.is_empty() && !n.is_empty() && n[0] != o[0] {
        errs.push(FieldError::invalid(
            "spec.ipFamilies[0]",
            ips_value(&s.cluster_ips),
            "may not change once set",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(cidrs: &[&str]) -> ServiceNet {
        let cidrs: Vec<IpNet> = cidrs.iter().map(|c| c.parse().unwrap()).collect();
        ServiceNet::new(&cidrs).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_are_checked() {
        let p = |s: &str| -> IpNet { s.parse().unwrap() };
        assert_eq!(ServiceNet::new(&[]).unwrap_err(), ServiceNetError::Count(0));
        assert!(matches!(
            ServiceNet::new(&[p("10.0.0.0/16"), p("10.1.0.0/16")]),
            Err(ServiceNetError::SameFamily(..))
        ));
        assert!(matches!(
            ServiceNet::new(&[p("10.0.0.0/31")]),
            Err(ServiceNetError::TooSmall(_))
        ));
        assert!(ServiceNet::new(&[p("10.0.0.0/30")]).is_ok());
        let n = net(&["fd00::/112", "10.0.0.0/24"]);
        assert_eq!(n.primary(), Family::V6);
        assert!(n.dual_stack());
        assert_eq!(n.first_ip(), ip("fd00::1"));
    }

    #[test]
    fn dynamic_addresses_come_from_above_the_static_band() {
        // A /12 has a band of 256 addresses for hand-picked IPs.
        let mut r = Range::new("10.96.0.0/12".parse().unwrap()).unwrap();
        assert_eq!(r.allocate_next().unwrap(), ip("10.96.1.1"));
        assert_eq!(r.allocate_next().unwrap(), ip("10.96.1.2"));
        r.allocate(&ip("10.96.0.10")).unwrap();
        assert_eq!(r.allocate(&ip("10.96.0.10")), Err(AllocError::Allocated));
        assert_eq!(
            r.allocate(&ip("10.95.0.1")).unwrap_err().to_string(),
            "the provided IP (10.95.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"
        );
        // Network and broadcast addresses are never handed out.
        assert!(matches!(
            r.allocate(&ip("10.96.0.0")),
            Err(AllocError::NotInRange { .. })
        ));
        assert!(matches!(
            r.allocate(&ip("10.111.255.255")),
            Err(AllocError::NotInRange { .. })
        ));
        r.allocate(&ip("10.111.255.254")).unwrap();
    }

    #[test]
    fn fresh_addresses_first_then_released_then_the_band_then_full() {
        // /27: 30 usable addresses, a band of 16.
        let mut r = Range::new("10.0.0.0/27".parse().unwrap()).unwrap();
        let first = r.allocate_next().unwrap();
        assert_eq!(first, ip("10.0.0.17"));
        r.release(&first);
        let mut got = vec![];
        for _ in 0..14 {
            got.push(r.allocate_next().unwrap());
        }
        assert_eq!(got[0], ip("10.0.0.18"), "a released address waits its turn");
        assert_eq!(got[12], ip("10.0.0.30"));
        assert_eq!(got[13], first, "then the released one");
        // Then the static band, low to high.
        assert_eq!(r.allocate_next().unwrap(), ip("10.0.0.1"));
        for _ in 0..15 {
            r.allocate_next().unwrap();
        }
        assert_eq!(r.allocate_next(), Err(AllocError::Full));
        r.release(&ip("10.0.0.5"));
        assert_eq!(r.allocate_next().unwrap(), ip("10.0.0.5"));
    }

    #[test]
    fn ipv6_range_has_no_broadcast() {
        let mut r = Range::new("fd00::/126".parse().unwrap()).unwrap();
        let got: Vec<IpAddr> = (0..3).map(|_| r.allocate_next().unwrap()).collect();
        assert_eq!(got, [ip("fd00::1"), ip("fd00::2"), ip("fd00::3")]);
        assert_eq!(r.allocate_next(), Err(AllocError::Full));
    }
}
