//! Served zones: how a zone name is written and which lists of zones make
//! sense.

use std::fmt;
use std::str::FromStr;

use hickory_proto::rr::Name;

/// A DNS zone, lower-cased and fully qualified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone(pub Name);

impl FromStr for Zone {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim_end_matches('.');
        if s.is_empty() {
            return Err("zone must not be empty".into());
        }
        // hickory names a bad character bare (`unrecognized char:  `, a
        // space one cannot see): name the first one escaped, with where.
        if let Some((i, c)) = s
            .chars()
            .enumerate()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(format!(
                "invalid zone {s:?}: character {} is {c:?}, not allowed in a zone name (letters, digits, '-', '.')",
                i + 1
            ));
        }
        if s.split('.').any(str::is_empty) {
            return Err(format!(
                "invalid zone {s:?}: an empty label (a leading '.' or '..')"
            ));
        }
        let name =
            Name::from_ascii(format!("{s}.")).map_err(|e| format!("invalid zone {s:?}: {e}"))?;
        Ok(Zone(name.to_lowercase()))
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Zone {
    /// `cluster.local.`, the Kubernetes default.
    pub fn cluster_local() -> Self {
        "cluster.local".parse().expect("a valid zone")
    }
}

/// Zones given twice, or reverse zones given as zones, are operator
/// mistakes; `reverse_hint` says where reverse zones come from instead.
pub fn check_zones(zones: &[Zone], reverse_hint: &str) -> Result<(), String> {
    if zones.is_empty() {
        return Err("at least one --zone is required".into());
    }
    for (i, z) in zones.iter().enumerate() {
        if zones[..i].contains(z) {
            return Err(format!("--zone {z} given twice"));
        }
        let s = z.to_string();
        if s.ends_with("in-addr.arpa.") || s.ends_with("ip6.arpa.") {
            return Err(format!("--zone {z}: reverse zones are {reverse_hint}"));
        }
    }
    Ok(())
}
