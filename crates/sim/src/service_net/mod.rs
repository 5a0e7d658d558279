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
//!
//! - this file: the registry steps (defaulting, allocation, release);
//! - `range`: one CIDR's allocator;
//! - `validate`: the field validation, with the apiserver's wording.

mod range;
mod validate;

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Value, json};

use crate::field::{BadValue, FieldError};
use podns_kapi::{ApiError, Kind};
use range::Range;
use validate::{
    upgrade_downgrade_cluster_ips, upgrade_downgrade_families, validate_cluster_ips_related,
    validate_service,
};

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
            Fail::Fields(errs) => crate::field::invalid_fields(Kind::Service, name, &errs),
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
            return Err(crate::field::invalid_fields(Kind::Service, name, &errs));
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
            return Err(crate::field::invalid_fields(Kind::Service, name, &errs));
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
}
