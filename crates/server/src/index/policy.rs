//! What the index publishes: the operator's choices where the Kubernetes
//! DNS-Based Service Discovery specification
//! (<https://github.com/kubernetes/dns/blob/master/docs/specification.md>)
//! leaves room or podns differs from it (ARCHITECTURE.md lists the record
//! rules and where each lives in code). The CLI maps its flags into
//! [`Policy`].

/// Which pods are published.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Publish {
    /// Every pod with an IP that is not terminal or terminating (what
    /// training frameworks want).
    #[default]
    Ip,
    /// Only Ready pods, unless the selecting Service sets
    /// publishNotReadyAddresses (the EndpointSlice rule).
    Ready,
}

/// Where hostname names (`<host>.<sub>.<ns>.svc`) come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Hostnames {
    /// From the pod alone (spec.hostname + spec.subdomain).
    #[default]
    Pod,
    /// Only when a headless Service named like the subdomain exists, as the
    /// spec says.
    Service,
}

/// Several published pods with one hostname.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Duplicates {
    /// Answer with one: Ready, then Running, then oldest, then name.
    #[default]
    One,
    /// Answer with all of them (the spec's behaviour).
    All,
}

/// The publication rules that shape the index.
/// `Default` is the CLI's defaults except the rank view, which is off
/// unless asked for (it needs a Job watch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub publish: Publish,
    pub hostnames: Hostnames,
    pub duplicates: Duplicates,
    /// Serve `rank.<zone>` from Job labels (and watch Jobs for it).
    pub rank_view: bool,
}

keywords!(Publish { Ip = "ip", Ready = "ready" });
keywords!(Hostnames { Pod = "pod", Service = "service" });
keywords!(Duplicates { One = "one", All = "all" });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_round_trip_and_reject_others() {
        for w in Publish::NAMES {
            assert_eq!(w.parse::<Publish>().unwrap().as_str(), *w);
        }
        assert_eq!("all".parse::<Duplicates>(), Ok(Duplicates::All));
        let err = "Ready".parse::<Publish>().unwrap_err();
        assert!(err.contains("one of: ip, ready"), "{err}");
    }
}
