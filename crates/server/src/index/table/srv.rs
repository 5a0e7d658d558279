//! SRV records as the table keeps them: a name's set, shared between the
//! writer's copy and the published one.

use std::sync::Arc;

use super::State;

/// An SRV record's data; the target is a forward key (relative to the zone).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Srv {
    pub port: u16,
    /// Shared by the SRV records of one member (one per Service port).
    pub target: Arc<str>,
}

/// The SRV records of one name, sorted, and how many members add each
/// (two members may add the same record: pods of one address, say).
///
/// A persistent B-tree (`imbl::OrdSet`): the writer keeps a headless
/// Service's set in this form and publishes a copy of it, which shares
/// every node, so a member's change costs O(log n) records copied, not
/// the whole set (8,192 targets cloned and compared per event before).
/// Comparing two copies skips the nodes they share. The tree holds the
/// records alone (24 bytes each); the few added more than once are
/// counted beside it, so a count does not widen every slot of every leaf.
#[derive(Clone, Debug, Default)]
pub struct SrvSet {
    records: imbl::OrdSet<Srv>,
    /// Records added by more than one member: how many more.
    more: std::collections::HashMap<Srv, u32, State>,
}

impl SrvSet {
    /// The distinct records, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Srv> {
        self.records.iter()
    }

    /// How many distinct records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Count one more member adding `r`.
    pub(crate) fn add(&mut self, r: &Srv) {
        if self.records.contains(r) {
            *self.more.entry(r.clone()).or_default() += 1;
        } else {
            self.records.insert(r.clone());
        }
    }

    /// Count one member fewer adding `r`; the record goes with the last.
    pub(crate) fn remove(&mut self, r: &Srv) {
        match self.more.get_mut(r) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.more.remove(r);
            }
            None => {
                self.records.remove(r);
            }
        }
    }
}

/// Two sets are equal when they publish the same records.
impl PartialEq for SrvSet {
    fn eq(&self, other: &Self) -> bool {
        self.records == other.records
    }
}

impl Eq for SrvSet {}

impl FromIterator<Srv> for SrvSet {
    fn from_iter<I: IntoIterator<Item = Srv>>(records: I) -> Self {
        let mut set = Self::default();
        for r in records {
            set.add(&r);
        }
        set
    }
}

impl<'a> IntoIterator for &'a SrvSet {
    type Item = &'a Srv;
    type IntoIter = imbl::ordset::Iter<'a, Srv, imbl::shared_ptr::DefaultSharedPtr>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record two members add stays until both have taken it.
    #[test]
    fn an_srv_record_added_twice_is_counted() {
        let r = |t: &str| Srv {
            port: 80,
            target: t.into(),
        };
        let mut set: SrvSet = [r("a"), r("b"), r("a")].into_iter().collect();
        assert!(set.iter().eq([&r("a"), &r("b")]));
        let copy = set.clone();
        set.remove(&r("a"));
        assert!(
            set.iter().eq([&r("a"), &r("b")]),
            "one member still adds it"
        );
        assert_eq!(set, copy, "equal: the same records");
        set.remove(&r("a"));
        assert!(set.iter().eq([&r("b")]));
        set.remove(&r("a"));
        set.add(&r("a"));
        assert!(
            set.iter().eq([&r("a"), &r("b")]),
            "a record never added is no count"
        );
        set.remove(&r("a"));
        set.remove(&r("b"));
        assert!(set.is_empty() && set.more.is_empty());
    }
}
