//! The consumer's connections by id: a vector sorted by [`ConnId`].
//!
//! Ids are handed out in increasing order, so a new connection is appended and iteration
//! order is id order, as with a `BTreeMap`; a look-up (several per message on the hot path)
//! is a binary search over a few contiguous entries instead of a walk down tree nodes.

use crate::driver::ConnId;
use std::ops::Index;

#[derive(Debug)]
pub(crate) struct Slots<T> {
    entries: Vec<(ConnId, T)>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Vec::new(),
        }
    }
}

impl<T> Slots<T> {
    fn position(&self, id: ConnId) -> Result<usize, usize> {
        // The newest connection is the likeliest one (and the only one, often).
        match self.entries.last() {
            Some((last, _)) if *last == id => Ok(self.entries.len() - 1),
            Some((last, _)) if *last < id => Err(self.entries.len()),
            _ => self.entries.binary_search_by_key(&id, |(k, _)| *k),
        }
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<&T> {
        self.position(id).ok().map(|i| &self.entries[i].1)
    }

    pub(crate) fn get_mut(&mut self, id: ConnId) -> Option<&mut T> {
        match self.position(id) {
            Ok(i) => Some(&mut self.entries[i].1),
            Err(_) => None,
        }
    }

    pub(crate) fn contains_key(&self, id: ConnId) -> bool {
        self.position(id).is_ok()
    }

    /// Inserts or replaces; returns the replaced value.
    pub(crate) fn insert(&mut self, id: ConnId, value: T) -> Option<T> {
        match self.position(id) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (id, value));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, id: ConnId) -> Option<T> {
        match self.position(id) {
            Ok(i) => Some(self.entries.remove(i).1),
            Err(_) => None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&ConnId, &T)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &ConnId> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut().map(|(_, v)| v)
    }
}

impl<T> Index<&ConnId> for Slots<T> {
    type Output = T;

    /// Panics if `id` is absent (only for ids just read from the map itself).
    fn index(&self, id: &ConnId) -> &T {
        match self.get(*id) {
            Some(v) => v,
            None => panic!("no connection {id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The same answers as a `BTreeMap` for any sequence of operations.
    #[test]
    fn behaves_like_a_btreemap() {
        let mut rng = crate::rng::Rng::new(7);
        let mut slots = Slots::default();
        let mut model = BTreeMap::new();
        for step in 0..20_000u64 {
            let id = ConnId::from_raw(rng.below(40));
            match rng.below(4) {
                0 | 1 => assert_eq!(slots.insert(id, step), model.insert(id, step)),
                2 => assert_eq!(slots.remove(id), model.remove(&id)),
                _ => {
                    assert_eq!(slots.get(id), model.get(&id));
                    assert_eq!(slots.contains_key(id), model.contains_key(&id));
                    if let Some(v) = slots.get_mut(id) {
                        *v += 1;
                        *model.get_mut(&id).unwrap() += 1;
                    }
                }
            }
            assert_eq!(slots.is_empty(), model.is_empty());
        }
        assert!(slots.iter().eq(model.iter()));
        assert!(slots.keys().eq(model.keys()));
        assert!(slots.values().eq(model.values()));
    }
}
