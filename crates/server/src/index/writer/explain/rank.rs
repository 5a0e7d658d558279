//! `<...>.rank`: a rank, the leader, a gang's summary, and a rank
//! without a published pod.

use std::net::IpAddr;

use super::super::rank_view::{COMPLETION_INDEX, JOB_NAME, LEGACY_JOB_NAME, group};
use super::*;
use crate::index::names::Label;

impl Writer {
    /// `<first>.<rest>.rank`: a rank or the leader of the gang `rest`, else
    /// the summary of the gang `whole` (the table's order: a name kept
    /// by number is looked for first).
    pub(super) fn explain_rank(&self, first: Label<'_>, rest: &str, whole: &str) -> Findings {
        let idx = first.as_str();
        let leader = idx == "leader";
        let index = first.number();
        if let Some((job, ns)) = rest.rsplit_once('.')
            && (leader || index.is_some())
        {
            for set in [false, true] {
                let g = group(set, ns, job);
                let built = match index {
                    Some(i) => self.build_rank(&g, i),
                    None => self.build_leader(&g),
                };
                if let Some((_, rrs)) = built.into_iter().next() {
                    let kind = if set { "JobSet" } else { "Job" };
                    let ip = rrs
                        .a
                        .first()
                        .map(|a| IpAddr::V4(*a))
                        .or_else(|| rrs.aaaa.first().map(|a| IpAddr::V6(*a)));
                    // The published pod that holds the address and comes
                    // first by the duplicate rule.
                    let objects: Vec<Object> = ip
                        .map(|ip| self.holders(ip, Some(ns)))
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|p| self.published(p, true))
                        .take(1)
                        .map(|p| self.pod_object(p, "answers", None))
                        .collect();
                    let (reason, what) = if leader {
                        (
                            Reason::RankLeader,
                            "the leader (rank 0, or the JobSet coordinator)".to_string(),
                        )
                    } else {
                        (Reason::Rank, format!("rank {idx}"))
                    };
                    return Findings::new(reason, format!("{what} of {kind} {ns}/{job}"))
                        .ns(ns)
                        .with(objects);
                }
            }
        }
        if let Some((job, ns)) = whole.rsplit_once('.') {
            for set in [false, true] {
                let g = group(set, ns, job);
                if let Some((_, rrs)) = self.build_summary(&g).into_iter().next() {
                    let kind = if set { "JobSet" } else { "Job" };
                    return Findings::new(
                        Reason::RankSummary,
                        format!(
                            "{kind} {ns}/{job}: {}",
                            rrs.txt.as_deref().unwrap_or_default()
                        ),
                    )
                    .ns(ns);
                }
            }
        }
        let Some((job, ns)) = rest.rsplit_once('.') else {
            let (job, ns) = (idx, rest);
            return Findings::new(
                Reason::NoRank,
                format!("no Job or JobSet {ns}/{job} with ranks is known"),
            )
            .ns(ns);
        };
        if leader {
            return self.explain_missing_rank(ns, job, "leader", 0);
        }
        match (index, idx.parse::<u32>()) {
            (Some(i), _) => self.explain_missing_rank(ns, job, idx, i),
            (None, Ok(i)) => Findings::new(
                Reason::NoSuchName,
                format!("{idx} is not the canonical spelling of rank {i}: DNS answers only {i}.{job}.{ns}.rank"),
            )
            .ns(ns),
            (None, Err(_)) => Findings::new(
                Reason::NoSuchName,
                "rank names are <index>.<job>.<namespace>.rank or leader.<job>.<namespace>.rank",
            )
            .ns(ns),
        }
    }

    /// A rank without a published pod: the pods of the Job that carry that
    /// completion index, in any state (a scan of the namespace: this is a
    /// debugging endpoint, not the query path).
    fn explain_missing_rank(&self, ns: &str, job: &str, idx: &str, index: u32) -> Findings {
        let mut pods: Vec<&Pod> = self
            .ns_pods
            .get(ns)
            .into_iter()
            .flat_map(|names| names.iter())
            .map(|id| self.pod(id))
            .filter(|p| {
                p.label(JOB_NAME).or_else(|| p.label(LEGACY_JOB_NAME)) == Some(job)
                    && p.label(COMPLETION_INDEX)
                        .or_else(|| p.annotation(COMPLETION_INDEX))
                        .and_then(|v| v.parse::<u32>().ok())
                        == Some(index)
            })
            .collect();
        pods.sort_by(|a, b| a.duplicate_order(b));
        let Some(first) = pods.first() else {
            return Findings::new(
                Reason::NoRank,
                format!("no pod of Job or JobSet {ns}/{job} holds rank {idx}"),
            )
            .ns(ns);
        };
        let why = self.not_published(first, true).unwrap_or(Reason::NoRank);
        let objects = pods
            .iter()
            .map(|p| self.pod_object(p, "holds the rank", self.not_published(p, true)))
            .collect();
        Findings::new(
            why,
            format!(
                "pod {ns}/{} holds rank {index} of Job {ns}/{job} but is not published ({})",
                first.name(),
                why.code()
            ),
        )
        .ns(ns)
        .with(objects)
    }
}
