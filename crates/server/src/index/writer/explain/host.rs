//! `<host>.<sub>.<ns>.svc`: hostname names, and which of the pods that
//! share one answers (the duplicate rule, by its own reason).

use super::super::model::DuplicateStep;
use super::*;
use crate::index::names::Label;

impl Writer {
    /// `<host>.<sub>.<ns>.svc`: a hostname name, or a headless Service's
    /// dashed name of a member's IP.
    pub(super) fn explain_host(&self, ns: &str, sub: &str, label: Label<'_>) -> Findings {
        let host = label.as_str();
        let pods: Vec<&Pod> = self
            .host_pods(ns, sub, host)
            .map(|id| self.pod(id))
            .collect();
        let has_published = pods.iter().any(|p| self.host_published(p));
        if !has_published
            && let Some(svc) = self.headless(ns, sub)
            && let Some(f) = self.explain_endpoint(svc, label)
        {
            return f;
        }
        if !has_published && let Some(svc) = self.headless(ns, sub) {
            if let Some(ip) = label.ip() {
                return self.explain_member(svc, ip);
            }
            if pods.is_empty()
                && let Some(ip) = label.loose_ip()
            {
                return not_canonical(host, ip).ns(ns);
            }
        }
        if pods.is_empty() {
            return Findings::new(
                Reason::NoPod,
                format!("no pod in namespace {ns} has hostname {host} and subdomain {sub}"),
            )
            .ns(ns);
        }
        match self.host_winner(ns, sub, host) {
            Some(winner) => self.explain_host_answered(ns, sub, host, &pods, winner),
            None => self.explain_host_unpublished(ns, sub, host, &pods),
        }
    }

    /// A hostname name no pod answers: the nearest reason is the pod the
    /// duplicate rule would have chosen.
    fn explain_host_unpublished(&self, ns: &str, sub: &str, host: &str, pods: &[&Pod]) -> Findings {
        let mut sorted = pods.to_vec();
        sorted.sort_by(|a, b| a.duplicate_order(b));
        let first = sorted[0];
        let why = self.host_not_published(first).unwrap_or(Reason::NoSuchName);
        let detail = match why {
            Reason::PodNoIp => {
                format!(
                    "pod {ns}/{} has hostname {host} but no IP yet",
                    first.name()
                )
            }
            Reason::PodTerminating => format!(
                "pod {ns}/{} has hostname {host} but is terminating (deletionTimestamp set)",
                first.name()
            ),
            Reason::PodTerminal => format!(
                "pod {ns}/{} has hostname {host} but is {:?}, a terminal phase",
                first.name(),
                first.phase
            ),
            Reason::PodNotReady => format!(
                "pod {ns}/{} has hostname {host} but is not Ready, and --publish ready publishes Ready pods only (unless the Service {sub} sets publishNotReadyAddresses)",
                first.name()
            ),
            Reason::HostnameNeedsService => format!(
                "pod {ns}/{} has hostname {host}, but --hostnames service requires a headless Service {ns}/{sub}, and there is none",
                first.name()
            ),
            _ => format!(
                "pod {ns}/{} has hostname {host} but is not published",
                first.name()
            ),
        };
        let objects = sorted
            .iter()
            .map(|p| self.pod_object(p, "has the hostname", self.host_not_published(p)))
            .collect();
        Findings::new(why, detail).ns(ns).with(objects)
    }

    /// A hostname name `winner` answers: the pods that share the hostname,
    /// and which step of the duplicate rule chose it over the next.
    fn explain_host_answered(
        &self,
        ns: &str,
        sub: &str,
        host: &str,
        pods: &[&Pod],
        winner: &Pod,
    ) -> Findings {
        let mut objects = vec![self.pod_object(winner, "answers", None)];
        let mut others: Vec<&Pod> = pods
            .iter()
            .copied()
            .filter(|p| !std::ptr::eq(*p, winner))
            .collect();
        others.sort_by(|a, b| a.duplicate_order(b));
        let rivals: Vec<&Pod> = others
            .iter()
            .copied()
            .filter(|p| self.host_published(p))
            .collect();
        for p in &others {
            let why = self.host_not_published(p);
            let role = if why.is_none() && self.policy.duplicates == Duplicates::All {
                "answers too (--duplicate-hostnames all)"
            } else if why.is_none() {
                "not chosen"
            } else {
                "has the hostname"
            };
            objects.push(self.pod_object(p, role, why));
        }
        if rivals.is_empty() {
            return Findings::new(
                Reason::Hostname,
                format!(
                    "pod {ns}/{} has spec.hostname {host} and spec.subdomain {sub}",
                    winner.name()
                ),
            )
            .ns(ns)
            .with(objects);
        }
        if self.policy.duplicates == Duplicates::All {
            return Findings::new(
                Reason::HostnameShared,
                format!(
                    "{} published pods share hostname {host}; --duplicate-hostnames all answers with every one",
                    rivals.len() + 1
                ),
            )
            .ns(ns)
            .with(objects);
        }
        let rival = rivals[0];
        let (by, why) = chosen_by(winner, rival);
        let mut f = Findings::new(
            Reason::HostnameShared,
            format!(
                "{} published pods share hostname {host}: {ns}/{} answers, not {ns}/{}, because {why}",
                rivals.len() + 1,
                winner.name(),
                rival.name()
            ),
        )
        .ns(ns)
        .with(objects);
        f.chosen_by = Some(by);
        f
    }
}

/// Which step of the duplicate rule put `winner` before `other`
/// ([`Pod::duplicate_step`]), as a code and a few words.
fn chosen_by(winner: &Pod, other: &Pod) -> (&'static str, String) {
    let (_, step) = winner.duplicate_step(other);
    let why = match step {
        DuplicateStep::Ready => format!("it is Ready and {} is not", other.name()),
        DuplicateStep::Running => {
            format!("it is Running and {} is {:?}", other.name(), other.phase)
        }
        DuplicateStep::Older => format!(
            "both are {}, and it is older (created {} s earlier)",
            if winner.ready() { "Ready" } else { "not Ready" },
            other.created.abs_diff(winner.created)
        ),
        DuplicateStep::Name | DuplicateStep::Namespace => {
            "they are alike in readiness, phase and age, and its name sorts first".to_string()
        }
    };
    (step.code(), why)
}
