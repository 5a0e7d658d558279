//! A sorted set in a boxed slice.

/// A sorted set in a boxed slice: most of the writer's sets hold one
/// element (the pods of one rank, the Services of one pod), where a
/// `BTreeSet` allocates a whole node (≈ 0.5 KB), and a `Vec`'s capacity is
/// 8 bytes more in every pod and rank for room these sets never use.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SmallSet<T>(Box<[T]>);

impl<T> Default for SmallSet<T> {
    fn default() -> Self {
        Self(Box::default())
    }
}

impl<T: Ord> SmallSet<T> {
    pub(crate) fn insert(&mut self, v: T) -> bool {
        match self.0.binary_search(&v) {
            Ok(_) => false,
            Err(i) => {
                let mut all = Vec::from(std::mem::take(&mut self.0));
                all.insert(i, v);
                self.0 = all.into_boxed_slice();
                true
            }
        }
    }
    pub(crate) fn remove<Q: Ord + ?Sized>(&mut self, v: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
    {
        match self.0.binary_search_by(|x| x.borrow().cmp(v)) {
            Ok(i) => {
                let mut all = Vec::from(std::mem::take(&mut self.0));
                all.remove(i);
                self.0 = all.into_boxed_slice();
                true
            }
            Err(_) => false,
        }
    }
    pub(crate) fn contains<Q: Ord + ?Sized>(&self, v: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
    {
        self.0.binary_search_by(|x| x.borrow().cmp(v)).is_ok()
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Take the least element out.
    pub(crate) fn pop_first(&mut self) -> Option<T> {
        let mut all = Vec::from(std::mem::take(&mut self.0));
        let first = (!all.is_empty()).then(|| all.remove(0));
        self.0 = all.into_boxed_slice();
        first
    }
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a SmallSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> IntoIterator for SmallSet<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        Vec::from(self.0).into_iter()
    }
}
