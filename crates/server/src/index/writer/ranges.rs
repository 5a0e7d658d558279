//! The ranges the reverse zones are learned from: each Node's
//! `spec.podCIDRs` and each ServiceCIDR's `spec.cidrs`, counted by range so
//! that 100k nodes' /24s cost one entry each and an event that does not
//! change a range (a Node's status update) changes nothing. When the set of
//! distinct ranges changes, the writer swaps a new
//! [`ReverseZones`](crate::index::reverse::ReverseZones) into the table
//! at its next flush.

use std::collections::BTreeMap;

use ipnet::IpNet;

use super::*;
use crate::index::reverse::ReverseZones;

/// Which watch a change came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    Nodes,
    ServiceCidrs,
}

impl Source {
    fn at(self) -> usize {
        match self {
            Source::Nodes => 0,
            Source::ServiceCidrs => 1,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Ranges {
    /// Learning is on (no `--reverse-cidr`): both lists are needed before
    /// the index is synced.
    learning: bool,
    /// Each object's ranges, by source and name.
    by_obj: [HashMap<String, Vec<IpNet>>; 2],
    /// How many objects hold each range.
    counts: BTreeMap<IpNet, u32>,
    /// A complete list of each source was applied.
    listed: [bool; 2],
    /// The distinct ranges changed since the table last got them.
    changed: bool,
}

impl Ranges {
    /// Whether every list the reverse zones need is in (always, when
    /// nothing is learned).
    pub(super) fn listed(&self) -> bool {
        !self.learning || self.listed.iter().all(|l| *l)
    }

    /// Apply one change; `true` when it completed a list.
    pub(super) fn stage(&mut self, source: Source, change: Change<RangesInfo>) -> bool {
        match change {
            Change::Apply(info) => {
                self.set(source, info.key.name, info.cidrs);
                false
            }
            Change::Delete(key) => {
                self.set(source, key.name, Vec::new());
                false
            }
            Change::Reset { items, .. } => {
                let keep: HashSet<&str> = items.iter().map(|i| i.key.name.as_str()).collect();
                self.retain(source, &keep);
                for info in items {
                    self.set(source, info.key.name, info.cidrs);
                }
                self.listed[source.at()] = true;
                true
            }
            Change::Listed { keys, .. } => {
                let keep: HashSet<&str> = keys.iter().map(|k| k.name.as_str()).collect();
                self.retain(source, &keep);
                self.listed[source.at()] = true;
                true
            }
        }
    }

    fn retain(&mut self, source: Source, keep: &HashSet<&str>) {
        let gone: Vec<String> = self.by_obj[source.at()]
            .keys()
            .filter(|n| !keep.contains(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            self.set(source, name, Vec::new());
        }
    }

    /// An object's ranges are now `cidrs` (empty: it is gone).
    fn set(&mut self, source: Source, name: String, mut cidrs: Vec<IpNet>) {
        cidrs.sort_unstable();
        cidrs.dedup();
        let objs = &mut self.by_obj[source.at()];
        if objs
            .get(&name)
            .map_or(cidrs.is_empty(), |old| *old == cidrs)
        {
            return;
        }
        let old = if cidrs.is_empty() {
            objs.remove(&name)
        } else {
            objs.insert(name, cidrs.clone())
        };
        for net in old.into_iter().flatten() {
            if let std::collections::btree_map::Entry::Occupied(mut e) = self.counts.entry(net) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                    self.changed = true;
                }
            }
        }
        for net in cidrs {
            let n = self.counts.entry(net).or_insert(0);
            if *n == 0 {
                self.changed = true;
            }
            *n += 1;
        }
    }

    /// The zones to publish, when the distinct ranges changed.
    pub(super) fn take_changed(&mut self) -> Option<ReverseZones> {
        if !self.learning || !std::mem::take(&mut self.changed) {
            return None;
        }
        let zones = ReverseZones::learned(self.counts.keys().copied());
        tracing::debug!(
            ranges = self.counts.len(),
            zones = zones.zones().len(),
            "reverse zones changed"
        );
        Some(zones)
    }
}

impl Writer {
    /// Learn the reverse zones from Nodes and ServiceCIDRs: the index is
    /// synced only once both are listed, and every change of their ranges
    /// swaps the table's zones (until then it owns none).
    pub fn with_ranges(mut self) -> Self {
        self.ranges.learning = true;
        self.table.set_reverse_zones(ReverseZones::learned([]));
        self.table.set_synced(false);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Lookup;
    use crate::metrics::Metrics;

    fn ranges(name: &str, cidrs: &[&str]) -> RangesInfo {
        RangesInfo {
            key: ObjKey::new("", name),
            cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
        }
    }

    fn apexes(t: &Table) -> Vec<String> {
        t.reverse_zones()
            .zones()
            .iter()
            .map(|n| crate::index::reverse::apex_name(*n))
            .collect()
    }

    #[test]
    fn zones_follow_nodes_and_service_cidrs_and_sync_waits_for_both() {
        let table = Table::new();
        let needs = SyncNeeds::default();
        let mut w =
            Writer::new(table.clone(), Policy::default(), Metrics::new(), needs).with_ranges();
        assert!(apexes(&table).is_empty());
        w.apply(Update::NodeRanges(Change::Apply(ranges(
            "n1",
            &["10.244.1.0/24"],
        ))));
        w.apply(Update::NodeRanges(Change::Listed {
            namespace: None,
            keys: vec![ObjKey::new("", "n1")],
        }));
        assert!(!table.is_synced(), "ServiceCIDRs not listed yet");
        assert_eq!(apexes(&table), ["1.244.10.in-addr.arpa"]);
        w.apply(Update::ServiceRanges(Change::all(vec![ranges(
            "kubernetes",
            &["10.96.0.0/16", "fd00:96::/112"],
        )])));
        assert!(table.is_synced());
        assert_eq!(
            apexes(&table),
            [
                "96.10.in-addr.arpa",
                "1.244.10.in-addr.arpa",
                "0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa"
            ]
        );
        // A status update with the same ranges changes nothing.
        let g = table.generation();
        w.apply(Update::NodeRanges(Change::Apply(ranges(
            "n1",
            &["10.244.1.0/24"],
        ))));
        assert_eq!(table.generation(), g);
        // A second node with the same range, then the first goes: kept.
        w.apply(Update::NodeRanges(Change::Apply(ranges(
            "n2",
            &["10.244.1.0/24"],
        ))));
        w.apply(Update::NodeRanges(Change::Delete(ObjKey::new("", "n1"))));
        assert_eq!(apexes(&table).len(), 3);
        // A relist without n2 drops its range.
        w.apply(Update::NodeRanges(Change::all(vec![ranges(
            "n3",
            &["10.244.3.0/24"],
        )])));
        assert!(apexes(&table).contains(&"3.244.10.in-addr.arpa".to_string()));
        assert!(!apexes(&table).contains(&"1.244.10.in-addr.arpa".to_string()));
        assert!(matches!(table.lookup("x"), Lookup::Missing));
    }
}
