//! Pod ids indexed by a name the pod itself holds: its name in a
//! namespace, its hostname under a subdomain. The hash table holds 4-byte
//! ids and hashes the pod's own string, which the writer's slab keeps
//! anyway. A map keyed by a shared copy of the name cost a 16-byte key and
//! a value a slot (24 to 48 bytes), twice that at the half load a hash
//! table runs at right after doubling.
//!
//! The caller says where an id's name is (`name_of`); every id in a
//! [`ByName`] must be a live pod whose name is the one it was added under.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::headless::PodId;

#[derive(Debug, Default)]
pub(crate) struct ByName {
    ids: HashTable<PodId>,
    hasher: foldhash::fast::RandomState,
}

impl ByName {
    /// Add `id`, named `name_of(id)`. Names may repeat (two pods of one
    /// hostname); an id is added once.
    pub(crate) fn insert<'a>(&mut self, id: PodId, name_of: impl Fn(PodId) -> &'a str) {
        let hasher = &self.hasher;
        let h = hasher.hash_one(name_of(id));
        self.ids
            .insert_unique(h, id, |&i| hasher.hash_one(name_of(i)));
    }

    /// Take `id`, added under `name`. Returns whether it was there.
    pub(crate) fn remove(&mut self, id: PodId, name: &str) -> bool {
        let h = self.hasher.hash_one(name);
        match self.ids.find_entry(h, |&i| i == id) {
            Ok(e) => {
                e.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// The ids named `name`.
    pub(crate) fn get<'s, 'n>(
        &'s self,
        name: &'s str,
        name_of: impl Fn(PodId) -> &'n str + 's,
    ) -> impl Iterator<Item = PodId> + 's {
        self.ids
            .iter_hash(self.hasher.hash_one(name))
            .copied()
            .filter(move |&i| name_of(i) == name)
    }

    /// Every id, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = PodId> + '_ {
        self.ids.iter().copied()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_by_their_name_and_taken_by_id() {
        let names = ["a", "b", "a", "c"];
        let name_of = |i: PodId| names[i as usize];
        let mut by = ByName::default();
        // Enough ids to make the table grow (rehashing through `name_of`).
        let many: Vec<String> = (0..200).map(|i| format!("p{i}")).collect();
        let many_of = |i: PodId| match i {
            0..4 => names[i as usize],
            _ => many[i as usize - 4].as_str(),
        };
        for i in 0..4 {
            by.insert(i, name_of);
        }
        let mut a: Vec<PodId> = by.get("a", name_of).collect();
        a.sort_unstable();
        assert_eq!(a, [0, 2], "two pods of one name");
        assert_eq!(by.get("b", name_of).collect::<Vec<_>>(), [1]);
        assert_eq!(by.get("z", name_of).count(), 0);
        for i in 4..204 {
            by.insert(i, many_of);
        }
        assert_eq!(by.get("p150", many_of).collect::<Vec<_>>(), [154]);
        assert_eq!(by.get("c", many_of).collect::<Vec<_>>(), [3]);
        assert!(by.remove(2, "a"));
        assert!(!by.remove(2, "a"), "taken once");
        assert!(!by.remove(1, "a"), "not under that name");
        assert_eq!(by.get("a", name_of).collect::<Vec<_>>(), [0]);
        assert_eq!(by.iter().count(), 203);
        for i in (0..204).filter(|&i| i != 2) {
            assert!(by.remove(i, many_of(i)));
        }
        assert!(by.is_empty());
    }
}
