//! A sparse array by `u32` index, in pages of up to 64 slots: the ranks of
//! a gang (indices 0..n, nearly dense) cost their slots and one page entry
//! per 64, where a hash map keyed by (gang, index) cost a key and a slot at
//! the map's load for each. A page is as long as its highest slot needs
//! (a power of two), so a gang of three costs four slots, not 64; it goes
//! with its last element, so an index far from the others (a label set by
//! hand) costs one short page, not a vector up to it.

use super::containers::HashMap;

const PAGE: usize = 64;

#[derive(Debug)]
struct Page<T> {
    /// 1, 2, 4 … [`PAGE`] slots: up to the highest used.
    slots: Box<[Option<T>]>,
    n: u8,
}

#[derive(Debug)]
pub(crate) struct Paged<T> {
    pages: HashMap<u32, Page<T>>,
}

impl<T> Default for Paged<T> {
    fn default() -> Self {
        Self {
            pages: HashMap::default(),
        }
    }
}

fn split(i: u32) -> (u32, usize) {
    (i / PAGE as u32, i as usize % PAGE)
}

impl<T> Paged<T> {
    pub(crate) fn get(&self, i: u32) -> Option<&T> {
        let (p, s) = split(i);
        self.pages.get(&p)?.slots.get(s)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        let (p, s) = split(i);
        self.pages.get_mut(&p)?.slots.get_mut(s)?.as_mut()
    }

    /// The element at `i`, made with `make` if there is none.
    pub(crate) fn get_or_insert_with(&mut self, i: u32, make: impl FnOnce() -> T) -> &mut T {
        let (p, s) = split(i);
        let page = self.pages.entry(p).or_insert_with(|| Page {
            slots: Box::default(),
            n: 0,
        });
        if s >= page.slots.len() {
            let mut slots = std::mem::take(&mut page.slots).into_vec();
            slots.resize_with((s + 1).next_power_of_two(), || None);
            page.slots = slots.into_boxed_slice();
        }
        if page.slots[s].is_none() {
            page.n += 1;
        }
        page.slots[s].get_or_insert_with(make)
    }

    /// Put `v` at `i`; the old element comes back.
    pub(crate) fn insert(&mut self, i: u32, v: T) -> Option<T> {
        let mut v = Some(v);
        let slot = self.get_or_insert_with(i, || v.take().expect("taken once"));
        v.map(|v| std::mem::replace(slot, v))
    }

    pub(crate) fn remove(&mut self, i: u32) -> Option<T> {
        let (p, s) = split(i);
        let page = self.pages.get_mut(&p)?;
        let old = page.slots.get_mut(s)?.take();
        if old.is_some() {
            page.n -= 1;
            if page.n == 0 {
                self.pages.remove(&p);
            }
        }
        old
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Every element with its index, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.pages.iter().flat_map(|(p, page)| {
            page.slots
                .iter()
                .enumerate()
                .filter_map(move |(s, v)| Some((p * PAGE as u32 + s as u32, v.as_ref()?)))
        })
    }

    #[cfg(test)]
    pub(crate) fn pages(&self) -> usize {
        self.pages.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gang of three (a StatefulSet's) costs four slots.
    #[test]
    fn a_small_gang_costs_a_short_page() {
        let mut p: Paged<[u8; 4]> = Paged::default();
        for i in 0..3 {
            p.insert(i, [10, 0, 0, i as u8]);
        }
        assert_eq!(p.pages.get(&0).unwrap().slots.len(), 4);
        assert_eq!(p.get(2), Some(&[10, 0, 0, 2]));
        assert_eq!((p.get(3), p.get(4), p.get(63)), (None, None, None));
        assert_eq!(p.remove(40), None, "past the page's end");
    }

    #[test]
    fn elements_live_in_pages_that_go_with_their_last() {
        let mut p: Paged<String> = Paged::default();
        assert_eq!(p.insert(0, "a".into()), None);
        assert_eq!(p.insert(63, "b".into()), None);
        assert_eq!(p.insert(64, "c".into()), None);
        assert_eq!(p.insert(u32::MAX, "far".into()), None);
        assert_eq!(p.pages(), 3, "0..63, 64..127, and the far one");
        let len = |p: &Paged<String>, page: u32| p.pages.get(&page).map(|p| p.slots.len());
        assert_eq!(
            (len(&p, 0), len(&p, 1), len(&p, u32::MAX / 64)),
            (Some(64), Some(1), Some(64)),
            "as long as the highest slot needs"
        );
        assert_eq!(p.insert(63, "B".into()).as_deref(), Some("b"));
        assert_eq!(p.get(63).map(String::as_str), Some("B"));
        assert_eq!(p.get(1), None);
        assert_eq!(p.get(u32::MAX).map(String::as_str), Some("far"));
        p.get_or_insert_with(1, || "x".into()).push('y');
        p.get_or_insert_with(1, || unreachable!()).push('z');
        assert_eq!(p.get(1).map(String::as_str), Some("xyz"));
        let mut all: Vec<(u32, &str)> = p.iter().map(|(i, v)| (i, v.as_str())).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            [
                (0, "a"),
                (1, "xyz"),
                (63, "B"),
                (64, "c"),
                (u32::MAX, "far")
            ]
        );
        assert_eq!(p.remove(64).as_deref(), Some("c"));
        assert_eq!(p.remove(64), None);
        assert_eq!(p.pages(), 2, "its page went with it");
        *p.get_mut(0).unwrap() = "A".into();
        for i in [0, 1, 63, u32::MAX] {
            assert!(p.remove(i).is_some());
        }
        assert!(p.is_empty());
    }
}
