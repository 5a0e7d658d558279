//! One shared copy of each value in use, given back by its holders: the
//! writer's label pairs, templates and lists of Services, the namespace and
//! Service names of the table's address entries, and the table's lists of
//! names spelled from an address. The pods (or addresses) of a gang hold
//! one copy where each held its own.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use super::maps::HashSet;

/// The values in use, one shared copy of each. A value leaves when the
/// last copy handed out is given back ([`Self::release`]).
#[derive(Debug)]
pub(crate) struct Interned<T: ?Sized>(HashSet<Arc<T>>);

impl<T: ?Sized> Default for Interned<T> {
    fn default() -> Self {
        Self(HashSet::default())
    }
}

impl<T: ?Sized + Hash + Eq> Interned<T> {
    /// The shared copy of `v` (made from it if there is none; else `v`
    /// is dropped).
    pub(crate) fn get<Q: Borrow<T> + Into<Arc<T>>>(&mut self, v: Q) -> Arc<T> {
        if let Some(shared) = self.0.get(v.borrow()) {
            return shared.clone();
        }
        let shared: Arc<T> = v.into();
        self.0.insert(shared.clone());
        shared
    }

    /// Give back `v`, a copy `get` handed out, which the caller drops next:
    /// if only this set holds another, the value leaves it.
    pub(crate) fn release(&mut self, v: &Arc<T>) {
        if Arc::strong_count(v) == 2 {
            self.0.remove(&**v);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_shared_and_leaves_with_its_last_holder() {
        let mut i: Interned<str> = Interned::default();
        let a = i.get("ml");
        let b = i.get("ml");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(i.len(), 1);
        i.release(&a);
        drop(a);
        assert_eq!(i.len(), 1, "b still holds it");
        i.release(&b);
        drop(b);
        assert_eq!(i.len(), 0);
    }
}
