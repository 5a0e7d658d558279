//! The rank view's data: a gang (a Job or a JobSet), its ranks by index
//! and the pods holding each, and the counters its summary prints. The
//! writer keeps it up to date (`ranks.rs`); it knows nothing of the
//! writer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::headless::PodId;
use crate::index::containers::{HashMap, SmallSet};
use crate::index::paged::Paged;

// The label names the rank view reads, for the writer's modules (their
// one spelling is `crate::labels`).
pub use crate::labels::{
    COMPLETION_INDEX, COORDINATOR, GLOBAL_INDEX, JOB_NAME, JOBSET_NAME, LEGACY_JOB_NAME,
    RESTART_ATTEMPT,
};

/// A gang: a Job (`set == false`) or a JobSet (`set == true`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    pub set: bool,
    pub ns: String,
    pub name: String,
}

/// A gang as the writer's indexes hold it: one allocation per gang, shared
/// by its ranks (see [`Ranks::canonical`]).
pub type Group = Arc<GroupKey>;

pub(super) fn group(set: bool, ns: impl Into<String>, name: impl Into<String>) -> Group {
    Arc::new(GroupKey {
        set,
        ns: ns.into(),
        name: name.into(),
    })
}

/// Counters of one gang, maintained as ranks change.
#[derive(Debug, Default)]
pub(super) struct GroupState {
    /// Pods linked to the gang, in any state.
    pub(super) pods: u32,
    /// Rank indices with at least one pod (the world when no Job says).
    pub(super) ranks: u32,
    pub(super) published: u32,
    pub(super) ready: u32,
    /// Pods per restart attempt, and the earliest creation in each.
    pub(super) generations: BTreeMap<u64, u32>,
    pub(super) gen_created: BTreeMap<u64, u32>,
    /// Generations whose completion time was observed.
    pub(super) completed: BTreeSet<u64>,
    pub(super) coordinator: Option<String>,
}

/// One rank of a gang: 8 bytes, and no allocation while one pod holds it
/// (two ranks a pod in a JobSet, so this is most of the rank view's cost).
#[derive(Debug)]
pub(super) struct Rank {
    /// The pods that hold the rank, in any state: one but for the moments
    /// of a restart (the old pod still deleting) or a duplicate index. The
    /// first here (`NONE` when there is none: an `Option` would double its
    /// 4 bytes); `more` says the others are in [`Ranks::more`] (a pointer
    /// here would double the rank, for a set held a moment).
    pub(super) first: PodId,
    pub(super) more: bool,
    /// (published, ready) as last built: what the gang's counters include.
    /// The entry stays until both are false, even with no pod left.
    pub(super) built: (bool, bool),
}

/// No JobSet rank (a global index this large is not linked).
pub(super) const NO_SET: u32 = u32::MAX;

/// No pod (the slab never hands this id out).
pub(super) const NONE: PodId = PodId::MAX;

impl Default for Rank {
    fn default() -> Self {
        Self {
            first: NONE,
            more: false,
            built: (false, false),
        }
    }
}

impl Rank {
    /// No pod holds the rank.
    pub(super) fn vacant(&self) -> bool {
        self.first == NONE
    }
}

/// Writer-side state of the rank view.
#[derive(Debug, Default)]
pub(super) struct Ranks {
    /// The ranks of each gang, by index (see `paged.rs`).
    pub(super) ranks: HashMap<Group, Paged<Rank>>,
    /// The JobSet rank each pod was linked with, by pod id (slab ids are
    /// dense and reused: 4 bytes a pod), `NO_SET` for none. A pod's Job
    /// rank is its labels' and the pod does not change while linked (an
    /// update unlinks the old one first), so only this rank, which the
    /// Job's completions at link time decide, is kept.
    pub(super) set_ranks: Vec<u32>,
    /// The pods past the first of each rank that more than one holds.
    pub(super) more: HashMap<(Group, u32), SmallSet<PodId>>,
    pub(super) groups: HashMap<Group, GroupState>,
    /// Jobs of each JobSet, by (namespace, jobset).
    pub(super) jobset_jobs: HashMap<(String, String), BTreeSet<String>>,
}

impl Ranks {
    pub(super) fn groups(&self) -> usize {
        self.groups.len()
    }

    /// Pod `id` holds rank `idx` of `group` (made if new); whether the
    /// rank was vacant.
    pub(super) fn hold(&mut self, group: &Group, idx: u32, id: PodId) -> bool {
        let rank = self
            .ranks
            .entry(group.clone())
            .or_default()
            .get_or_insert_with(idx, Rank::default);
        if rank.vacant() {
            rank.first = id;
            return true;
        }
        if rank.first != id {
            self.more
                .entry((group.clone(), idx))
                .or_default()
                .insert(id);
            rank.more = true;
        }
        false
    }

    /// Pod `id` no longer holds rank `idx` of `group`; the rank, if kept.
    pub(super) fn let_go(&mut self, group: &Group, idx: u32, id: PodId) -> Option<&mut Rank> {
        let rank = self.ranks.get_mut(group)?.get_mut(idx)?;
        if rank.more {
            let key = (group.clone(), idx);
            let more = self.more.get_mut(&key).expect("a rank's other holders");
            if rank.first == id {
                rank.first = more.pop_first().expect("not empty");
            } else {
                more.remove(&id);
            }
            if more.is_empty() {
                self.more.remove(&key);
                rank.more = false;
            }
        } else if rank.first == id {
            rank.first = NONE;
        }
        Some(rank)
    }

    /// The pods holding rank `idx` of `group`.
    pub(super) fn holders(&self, group: &Group, idx: u32) -> impl Iterator<Item = PodId> + '_ {
        let rank = self.ranks.get(group).and_then(|r| r.get(idx));
        let more = rank
            .filter(|r| r.more)
            .and_then(|_| self.more.get(&(group.clone(), idx)));
        rank.map(|r| r.first)
            .filter(|&f| f != NONE)
            .into_iter()
            .chain(more.into_iter().flat_map(|m| m.iter().copied()))
    }

    pub(super) fn rank_mut(&mut self, group: &Group, idx: u32) -> Option<&mut Rank> {
        self.ranks.get_mut(group)?.get_mut(idx)
    }

    /// Drop rank `idx` of `group`; the gang's entry goes with its last.
    pub(super) fn remove_rank(&mut self, group: &Group, idx: u32) {
        if let Some(ranks) = self.ranks.get_mut(group) {
            ranks.remove(idx);
            if ranks.is_empty() {
                self.ranks.remove(group);
            }
        }
    }

    /// The shared allocation of a gang already known.
    pub(super) fn canonical(&self, group: Group) -> Group {
        match self.groups.get_key_value(&group) {
            Some((g, _)) => g.clone(),
            None => group,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_is_eight_bytes_and_keeps_every_holder() {
        assert_eq!(std::mem::size_of::<Option<Rank>>(), 8);
        let mut r = Ranks::default();
        let g = group(false, "ml", "w");
        let pods = |r: &Ranks| r.holders(&g, 3).collect::<Vec<_>>();
        assert!(r.hold(&g, 3, 7), "vacant before");
        assert!(!r.hold(&g, 3, 7));
        assert!(r.more.is_empty(), "one holder allocates nothing");
        r.hold(&g, 3, 4);
        r.hold(&g, 3, 9);
        assert_eq!(pods(&r), [7, 4, 9]);
        assert!(r.holders(&g, 2).next().is_none());
        r.let_go(&g, 3, 7);
        assert_eq!(pods(&r), [4, 9]);
        r.let_go(&g, 3, 9);
        assert_eq!(pods(&r), [4]);
        assert!(r.more.is_empty(), "the spare set goes with its last");
        r.let_go(&g, 3, 5);
        assert_eq!(pods(&r), [4]);
        assert!(r.let_go(&g, 3, 4).unwrap().vacant());
        assert!(r.let_go(&g, 8, 4).is_none(), "no such rank");
    }
}
