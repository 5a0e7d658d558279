//! The rank view: training ranks by index under `rank.<zone>`, the leader,
//! and a one-TXT summary of a gang, kept up to date by the writer so that
//! every query is one lookup.
//!
//! - `<i>.<job>.<ns>.rank`: the pod of Job `<job>` with completion index `<i>`
//! - `<g>.<jobset>.<ns>.rank`: g = job-global-index × completions + index
//! - `leader.<job|jobset>.<ns>.rank`: rank 0, or the JobSet coordinator
//! - `<job|jobset>.<ns>.rank` TXT: `world=W published=P ready=R generation=G`

use super::build::add_ips;
use super::rank_view::*;
use super::*;

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.label(key)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.annotation(key)
}

fn job_label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The Job a pod belongs to: `batch.kubernetes.io/job-name`, else `job-name`.
fn job_of(pod: &Pod) -> Option<&str> {
    label(pod, JOB_NAME).or_else(|| label(pod, LEGACY_JOB_NAME))
}

fn generation_of(pod: &Pod) -> u64 {
    label(pod, RESTART_ATTEMPT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Writer {
    /// The Job rank a pod's labels give it: its Job and completion index.
    fn job_rank(&self, pod: &Pod) -> Option<(Group, u32)> {
        if !self.policy.rank_view {
            return None;
        }
        let job = job_of(pod)?;
        let index = label(pod, COMPLETION_INDEX)
            .or_else(|| annotation(pod, COMPLETION_INDEX))
            .and_then(|v| v.parse::<u32>().ok())?;
        Some((self.ranks.canonical(group(false, &**pod.ns(), job)), index))
    }

    /// The JobSet rank of a pod with Job rank `index` under the current
    /// Jobs: g = job-global-index × the Job's completions + index.
    fn set_rank(&self, pod: &Pod, index: u32) -> Option<u32> {
        let ns = &**pod.ns();
        label(pod, JOBSET_NAME)?;
        let gi = label(pod, GLOBAL_INDEX)?.parse::<u32>().ok()?;
        let completions = self.jobs.get(&ObjKey::new(ns, job_of(pod)?))?.completions?;
        gi.checked_mul(completions)?
            .checked_add(index)
            .filter(|&g| g != NO_SET)
    }

    /// A pod's ranks: its Job rank and, with JobSet rank `set`, that one
    /// in its JobSet (whose name `set_rank` found on the pod).
    fn links(&self, pod: &Pod, job: (Group, u32), set: Option<u32>) -> Vec<(Group, u32)> {
        let mut out = vec![job];
        if let Some(g) = set
            && let Some(js) = label(pod, JOBSET_NAME)
        {
            out.push((self.ranks.canonical(group(true, &**pod.ns(), js)), g));
        }
        out
    }

    /// The ranks a pod holds as it was linked: its Job's (its labels say
    /// which) and its JobSet's, as [`Self::link_ranks`] found it.
    fn linked(&self, id: PodId) -> Vec<(Group, u32)> {
        let pod = self.pods.get(id);
        let Some(job) = self.job_rank(pod) else {
            return vec![];
        };
        let set = self.ranks.set_ranks.get(id as usize).copied();
        self.links(pod, job, set.filter(|&g| g != NO_SET))
    }

    pub(super) fn link_ranks(&mut self, id: PodId) {
        let pod = self.pods.get(id);
        let Some(job) = self.job_rank(pod) else {
            return;
        };
        let set = self.set_rank(pod, job.1);
        let links = self.links(pod, job, set);
        let generation = generation_of(pod);
        for (group, idx) in links {
            let new_rank = self.ranks.hold(&group, idx, id);
            let g = self.ranks.groups.entry(group).or_default();
            g.pods += 1;
            g.ranks += u32::from(new_rank);
            *g.generations.entry(generation).or_default() += 1;
            let created = g.gen_created.entry(generation).or_insert(pod.created);
            *created = (*created).min(pod.created);
            if let Some(c) = annotation(pod, COORDINATOR).or_else(|| label(pod, COORDINATOR)) {
                g.coordinator = Some(c.to_string());
            }
        }
        let i = id as usize;
        if self.ranks.set_ranks.len() <= i {
            self.ranks.set_ranks.resize(i + 1, NO_SET);
        }
        self.ranks.set_ranks[i] = set.unwrap_or(NO_SET);
    }

    pub(super) fn unlink_ranks(&mut self, id: PodId) {
        let links = self.linked(id);
        if let Some(g) = self.ranks.set_ranks.get_mut(id as usize) {
            *g = NO_SET;
        }
        let generation = generation_of(self.pods.get(id));
        for (group, idx) in links {
            let mut rank_gone = false;
            if let Some(rank) = self.ranks.let_go(&group, idx, id)
                && rank.vacant()
            {
                rank_gone = true;
                if rank.built == (false, false) {
                    self.ranks.remove_rank(&group, idx);
                }
            }
            if let Some(g) = self.ranks.groups.get_mut(&group) {
                g.pods = g.pods.saturating_sub(1);
                g.ranks = g.ranks.saturating_sub(u32::from(rank_gone));
                if let Some(n) = g.generations.get_mut(&generation) {
                    *n -= 1;
                    if *n == 0 {
                        g.generations.remove(&generation);
                    }
                }
            }
        }
    }

    /// Keys of the rank view that depend on this pod as it is linked now.
    pub(super) fn rank_keys(&self, id: PodId, out: &mut Vec<Key>) {
        for (group, idx) in self.linked(id) {
            out.push(Key::Rank(group.clone(), idx));
            out.push(Key::Leader(group.clone()));
            out.push(Key::Summary(group));
        }
    }

    // ---- Jobs -----------------------------------------------------------

    pub(super) fn apply_job(&mut self, job: JobInfo) {
        if self.jobs.get(&job.key) == Some(&job) {
            return;
        }
        let key = job.key.clone();
        let old = self.jobs.remove(&key);
        if let Some(old) = &old {
            self.unlink_jobset(old);
        }
        self.link_jobset(&job);
        self.jobs.insert(key.clone(), job);
        self.relink_job_pods(&key);
    }

    pub(super) fn delete_job(&mut self, key: &ObjKey) {
        let Some(old) = self.jobs.remove(key) else {
            return;
        };
        self.unlink_jobset(&old);
        self.relink_job_pods(key);
    }

    pub(super) fn retain_jobs<'a>(
        &mut self,
        namespace: Option<&str>,
        listed: impl Iterator<Item = &'a ObjKey>,
    ) {
        for k in &vanished(&self.jobs, namespace, listed) {
            self.delete_job(k);
        }
    }

    fn link_jobset(&mut self, job: &JobInfo) {
        self.dirty.push(Key::Summary(group(
            false,
            job.key.namespace.clone(),
            job.key.name.clone(),
        )));
        if let Some(js) = job_label(&job.labels, JOBSET_NAME) {
            self.ranks
                .jobset_jobs
                .entry((job.key.namespace.clone(), js.to_string()))
                .or_default()
                .insert(job.key.name.clone());
            self.dirty.push(Key::Summary(group(
                true,
                job.key.namespace.clone(),
                js.to_string(),
            )));
        }
    }

    fn unlink_jobset(&mut self, job: &JobInfo) {
        self.dirty.push(Key::Summary(group(
            false,
            job.key.namespace.clone(),
            job.key.name.clone(),
        )));
        if let Some(js) = job_label(&job.labels, JOBSET_NAME) {
            let k = (job.key.namespace.clone(), js.to_string());
            if let Some(set) = self.ranks.jobset_jobs.get_mut(&k) {
                set.remove(&job.key.name);
                if set.is_empty() {
                    self.ranks.jobset_jobs.remove(&k);
                }
            }
            self.dirty.push(Key::Summary(group(
                true,
                job.key.namespace.clone(),
                js.to_string(),
            )));
        }
    }

    /// Relink the pods of a Job whose completions (so its pods' JobSet
    /// ranks) may have changed. A pod the Job's completions can move has a
    /// completion index, so it holds a rank of the Job: the Job's ranks
    /// list them all, and no index of pods by Job is kept beside them.
    fn relink_job_pods(&mut self, job: &ObjKey) {
        let g = group(false, &*job.namespace, &*job.name);
        let mut ids: Vec<PodId> = self
            .ranks
            .ranks
            .get(&g)
            .into_iter()
            .flat_map(|ranks| ranks.iter().flat_map(|(i, _)| self.ranks.holders(&g, i)))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut dirty = Vec::new();
        for id in ids {
            self.rank_keys(id, &mut dirty);
            self.unlink_ranks(id);
            self.link_ranks(id);
            self.rank_keys(id, &mut dirty);
        }
        self.dirty.extend(dirty);
    }

    // ---- building ------------------------------------------------------

    /// The pod that answers for a rank (the duplicate-hostname rule; always one).
    fn rank_pod(&self, group: &Group, idx: u32) -> Option<&Pod> {
        let pods: Vec<&Pod> = self
            .ranks
            .holders(group, idx)
            .map(|id| self.pod(id))
            .filter(|p| self.published(p, true))
            .collect();
        self.choose_one(pods)
    }

    /// Before a rank's names are built: move the gang's counters by the
    /// difference between the rank's old and new state.
    pub(super) fn update_rank_state(&mut self, group: &Group, idx: u32) {
        let new = self
            .rank_pod(group, idx)
            .map(|p| (true, p.ready()))
            .unwrap_or((false, false));
        // No entry means no pod, so `new` is (false, false) as well.
        let Some(rank) = self.ranks.rank_mut(group, idx) else {
            return;
        };
        let old = std::mem::replace(&mut rank.built, new);
        if new == (false, false) && rank.vacant() {
            self.ranks.remove_rank(group, idx);
        }
        if old == new {
            return;
        }
        if let Some(g) = self.ranks.groups.get_mut(group) {
            g.published = g.published + u32::from(new.0) - u32::from(old.0);
            g.ready = g.ready + u32::from(new.1) - u32::from(old.1);
        }
    }

    pub(super) fn build_rank(&self, group: &Group, idx: u32) -> Vec<(String, Rrs)> {
        let Some(pod) = self.rank_pod(group, idx) else {
            return vec![];
        };
        let mut rrs = Rrs::default();
        add_ips(&mut rrs, &pod.ips);
        vec![(rank_name(idx, &group.name, &group.ns), rrs)]
    }

    pub(super) fn build_leader(&self, group: &Group) -> Vec<(String, Rrs)> {
        let coordinator = self
            .ranks
            .groups
            .get(group)
            .and_then(|g| g.coordinator.as_deref());
        // The JobSet coordinator is named `<hostname>.<subdomain>[...]`.
        let by_coordinator = coordinator.and_then(|c| {
            let mut labels = c.split('.');
            let (host, sub) = (labels.next()?, labels.next()?);
            self.host_winner(&group.ns, sub, host)
        });
        let Some(pod) = by_coordinator.or_else(|| self.rank_pod(group, 0)) else {
            return vec![];
        };
        let mut rrs = Rrs::default();
        add_ips(&mut rrs, &pod.ips);
        vec![(leader_name(&group.name, &group.ns), rrs)]
    }

    /// The declared world size: a Job's completions, or the sum over a
    /// JobSet's Jobs; without Job objects, the ranks seen.
    fn world(&self, group: &Group) -> u32 {
        let declared: u32 = if group.set {
            self.ranks
                .jobset_jobs
                .get(&(group.ns.clone(), group.name.clone()))
                .into_iter()
                .flatten()
                .filter_map(|j| self.jobs.get(&ObjKey::new(group.ns.as_str(), j.as_str())))
                .filter_map(|j| j.completions)
                .sum()
        } else {
            self.jobs
                .get(&ObjKey::new(group.ns.as_str(), group.name.as_str()))
                .and_then(|j| j.completions)
                .unwrap_or(0)
        };
        if declared > 0 {
            declared
        } else {
            self.ranks.groups.get(group).map_or(0, |g| g.ranks)
        }
    }

    fn group_known(&self, group: &Group) -> bool {
        self.ranks.groups.get(group).is_some_and(|g| g.pods > 0)
            || if group.set {
                self.ranks
                    .jobset_jobs
                    .contains_key(&(group.ns.clone(), group.name.clone()))
            } else {
                self.jobs
                    .contains_key(&ObjKey::new(group.ns.as_str(), group.name.as_str()))
            }
    }

    /// Before a summary is built: drop a gang nobody refers to any more, and
    /// observe the gang completion time the first time every rank of the
    /// current generation is published.
    pub(super) fn settle_group(&mut self, group: &Group) {
        if !self.group_known(group) {
            self.ranks.groups.remove(group);
            return;
        }
        let world = self.world(group);
        let Some(g) = self.ranks.groups.get_mut(group) else {
            return;
        };
        let generation = g.generations.keys().next_back().copied().unwrap_or(0);
        if world > 0 && g.published >= world && !g.completed.contains(&generation) {
            g.completed.insert(generation);
            if let Some(created) = g.gen_created.get(&generation) {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                self.metrics
                    .gang_complete
                    .observe((now - *created as f64).max(0.0));
            }
        }
    }

    pub(super) fn build_summary(&self, group: &Group) -> Vec<(String, Rrs)> {
        if !self.group_known(group) {
            return vec![];
        }
        let (published, ready, generation) = self.ranks.groups.get(group).map_or((0, 0, 0), |g| {
            (
                g.published,
                g.ready,
                g.generations.keys().next_back().copied().unwrap_or(0),
            )
        });
        let txt = format!(
            "world={} published={published} ready={ready} generation={generation}",
            self.world(group)
        );
        vec![(
            gang_name(&group.name, &group.ns),
            Rrs {
                txt: Some(txt.into()),
                ..Default::default()
            },
        )]
    }
}
