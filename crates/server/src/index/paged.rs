//! A sparse array by `u32` index, in pages of 64 slots: the ranks of a
//! gang (indices 0..n, nearly dense) cost their slots and one page entry
//! per 64, where a hash map keyed by (gang, index) cost a key and a slot at
//! the map's load for each. A page goes with its last element, so an index
//! far from the others (a label set by hand) costs one page, not a vector
//! up to it.

use super::writer::HashMap;

const PAGE: usize = 64;

#[derive(Debug)]
struct Page<T> {
    slots: [Option<T>; PAGE],
    n: u8,
}

#[derive(Debug)]
pub(crate) struct Paged<T> {
    pages: HashMap<u32, Box<Page<T>>>,
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
        self.pages.get(&p)?.slots[s].as_ref()
    }

    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        let (p, s) = split(i);
        self.pages.get_mut(&p)?.slots[s].as_mut()
    }

    /// The element at `i`, made with `make` if there is none.
    pub(crate) fn get_or_insert_with(&mut self, i: u32, make: impl FnOnce() -> T) -> &mut T {
        let (p, s) = split(i);
        let page = self.pages.entry(p).or_insert_with(|| {
            Box::new(Page {
                slots: std::array::from_fn(|_| None),
                n: 0,
            })
        });
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
        let old = page.slots[s].take();
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

    #[test]
    fn elements_live_in_pages_that_go_with_their_last() {
        let mut p: Paged<String> = Paged::default();
        assert_eq!(p.insert(0, "a".into()), None);
        assert_eq!(p.insert(63, "b".into()), None);
        assert_eq!(p.insert(64, "c".into()), None);
        assert_eq!(p.insert(u32::MAX, "far".into()), None);
        assert_eq!(p.pages(), 3, "0..63, 64..127, and the far one");
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
