//! The validation of the Service IP fields (`ValidateService`,
//! `ValidateServiceClusterIPsRelatedFields` and the upgrade/downgrade
//! rules of `ValidateServiceUpdate`), with the apiserver's field paths and
//! wording.

use std::net::IpAddr;

use super::{Family, NONE, PREFER, REQUIRE, SINGLE, Spec, families_value, ips_value};
use crate::field::{BadValue, FieldError};

/// The parts of `ValidateService` about these fields: ExternalName
/// carries none of them; other types must be consistent.
pub(super) fn validate_service(s: &Spec) -> Vec<FieldError> {
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
pub(super) fn validate_cluster_ips_related(s: &Spec) -> Vec<FieldError> {
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
pub(super) fn upgrade_downgrade_cluster_ips(old: &Spec, s: &Spec) -> Vec<FieldError> {
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
pub(super) fn upgrade_downgrade_families(old: &Spec, s: &Spec) -> Vec<FieldError> {
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
